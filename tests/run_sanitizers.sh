#!/usr/bin/env bash
# tests/run_sanitizers.sh — builds the unit tests with AddressSanitizer and
# UndefinedBehaviorSanitizer (-DJOBHOST_SANITIZE=ON, build dir build-asan) and runs them.
#
# Runs jobhost_unit_tests, jobhost_state_tests, jobhost_rocksdb_tests and jobhost_plugin_tests only (the e2e,
# bench and packaging tests drive the real binary and are too slow under ASan for CI).
# Any sanitizer report fails the run: leaks are detected, UBSan halts on the first error.
#
# Usage: tests/run_sanitizers.sh [build-dir]      (default: build-asan; env JOBS=2)
# Called from .ci/run after the main tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-asan}
JOBS=${JOBS:-2}
start=$(date +%s)

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# -O1 -g1: about twice as fast to compile as -O2 -g, still file:line in every report;
# assertions stay on (no NDEBUG).
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DJOBHOST_SANITIZE=ON \
  "${launcher[@]}" >/dev/null
targets=(jobhost_unit_tests jobhost_state_tests jobhost_rocksdb_tests jobhost_plugin_tests)
ninja -C "$BUILD" -j"$JOBS" "${targets[@]}"
built=$(date +%s)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

status=0
summary=()
for t in "${targets[@]}"; do
  t0=$(date +%s)
  # Each binary on its own (not ctest), so a sanitizer report is printed in full.
  if "$BUILD/tests/$t" --gtest_brief=1; then
    summary+=("PASS  $t ($(( $(date +%s) - t0 )) s)")
  else
    rc=$?
    summary+=("FAIL  $t (exit $rc, $(( $(date +%s) - t0 )) s)")
    status=1
  fi
done

echo
echo "== sanitizer summary (ASan+UBSan, build $((built - start)) s, total $(( $(date +%s) - start )) s)"
printf '  %s\n' "${summary[@]}"
exit $status
