#!/usr/bin/env bash
# tests/run_tsan.sh — builds the state tests with ThreadSanitizer (-DJOBHOST_TSAN=ON, build
# dir build-tsan) and runs them (issue 16, item 2).
#
# jobhost_state_tests holds the heap and RocksDB backends' tests, among them snapshots
# uploading on their own threads while the task thread writes (the heap backend's
# copy-on-write protocol: pins with release/acquire ordering). Only that binary: it needs
# state/ alone, so the TSan build stays small. RocksDB itself is Debian's uninstrumented
# library; reports from inside it would be about its internals, so none are suppressed and
# any report fails the run.
#
# Usage: tests/run_tsan.sh [build-dir]      (default: build-tsan; env JOBS=2)
# Called from .ci/run after the main tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-tsan}
JOBS=${JOBS:-2}
start=$(date +%s)
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DJOBHOST_TSAN=ON \
  "${launcher[@]}" >/dev/null
ninja -C "$BUILD" -j"$JOBS" jobhost_state_tests
built=$(date +%s)
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
status=0
"$BUILD/tests/jobhost_state_tests" --gtest_brief=1 || status=$?
echo
echo "== tsan summary (ThreadSanitizer, build $((built - start)) s, total $(( $(date +%s) - start )) s): $([ $status = 0 ] && echo PASS || echo "FAIL (exit $status)") jobhost_state_tests"
exit $status
