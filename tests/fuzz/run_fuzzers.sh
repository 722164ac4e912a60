#!/usr/bin/env bash
# tests/fuzz/run_fuzzers.sh — builds the libFuzzer targets with clang in their own build
# directory and runs each for a bounded time over its seed corpus. Fails if any target
# crashes, leaks, hits undefined behaviour, times out on one input or violates an
# invariant; the reproducer is kept in $ARTIFACTS (default: build-fuzz/artifacts).
#
# Usage: tests/fuzz/run_fuzzers.sh [seconds-per-target]     (default 60; env JOBS=2)
# Re-run one crash:  build-fuzz/tests/fuzz/<target> <artifact-file>
# Called from .ci/run after the main tests. Needs clang and libclang-rt-14-dev.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_TARGET=${1:-60}
BUILD=${BUILD:-build-fuzz}
JOBS=${JOBS:-2}
ARTIFACTS=${ARTIFACTS:-$(realpath -m "$BUILD")/artifacts}
TARGETS=(metadata_fuzz plugin_metadata_fuzz keygroup_fuzz http_request_fuzz config_fuzz control_fuzz)
start=$(date +%s)

CC=${CC:-clang} CXX=${CXX:-clang++}
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
# Every object of the libraries under test gets coverage instrumentation and sanitizers
# (fuzzer-no-link); the fuzz executables add libFuzzer's main (tests/fuzz/CMakeLists.txt).
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
  -DJOBHOST_FUZZ=ON "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  >/dev/null
ninja -C "$BUILD" -j"$JOBS" "${TARGETS[@]}"
built=$(date +%s)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
mkdir -p "$ARTIFACTS"
rm -f "$ARTIFACTS"/*_fuzz-*  # list only this run's reproducers
# One target per core at a time ($JOBS at once): each writes its summary line to
# $BUILD/$t.result, printed in the targets' order at the end.
fuzz_one() {  # fuzz_one TARGET: runs it, writes $BUILD/TARGET.result, returns its status
  local t=$1 seeds=tests/fuzz/corpus/${1%_fuzz} scratch log=$BUILD/$1.log t0
  # libFuzzer adds new inputs to the FIRST corpus directory: a scratch one, so the
  # committed seeds stay as they are.
  scratch=$(mktemp -d)
  t0=$(date +%s)
  if "$BUILD/tests/fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$ARTIFACTS/$t-" "$scratch" "$seeds" >"$log" 2>&1; then
    local runs cov
    runs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -ao 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "PASS  $t: $runs runs in $(( $(date +%s) - t0 )) s, $cov, $(ls "$scratch" | wc -l) new inputs" >"$BUILD/$t.result"
    rm -rf "$scratch"
    return 0
  fi
  {
    echo "FAIL  $t: see $log; reproducer: $(ls "$ARTIFACTS"/"$t"-* 2>/dev/null | tr '\n' ' ')"
    # The report itself: its first line and the frames in our code.
    grep -m1 -E '^==[0-9]+== ?(ERROR|WARNING)|runtime error|deadly signal|invariant violated|ERROR: libFuzzer' "$log" || tail -20 "$log"
    grep -E '^ +#[0-9]+ .* in (jobhost::|LLVMFuzzerTestOneInput)' "$log" | head -12 | cut -c1-240 || true
  } >"$BUILD/$t.result"
  rm -rf "$scratch"
  return 1
}
status=0
running=0
for t in "${TARGETS[@]}"; do
  rm -f "$BUILD/$t.result"
  if [ "$running" -ge "$JOBS" ]; then wait -n || status=1; running=$((running - 1)); fi
  fuzz_one "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do wait -n || status=1; running=$((running - 1)); done
summary=()
for t in "${TARGETS[@]}"; do
  [ -f "$BUILD/$t.result" ] || { echo "FAIL  $t: no result (the runner died)" >"$BUILD/$t.result"; status=1; }
  head -1 "$BUILD/$t.result" | grep -q '^PASS' || { echo "---- $t"; tail -n +2 "$BUILD/$t.result"; status=1; }
  summary+=("$(head -1 "$BUILD/$t.result")")
done

echo
echo "== fuzz summary (${SECONDS_PER_TARGET} s per target, build $((built - start)) s, total $(( $(date +%s) - start )) s)"
printf '  %s\n' "${summary[@]}"
exit $status
