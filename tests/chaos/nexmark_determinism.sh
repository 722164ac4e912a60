#!/usr/bin/env bash
# tests/chaos/nexmark_determinism.sh — the long form of the Nexmark determinism test
# (issue 35): NexmarkQ5, Q7 and Q8 on both backends, p=1 and p=2, with and without a CPU
# hog, each run's printed results compared with the loops of tests/e2e/nexmark_test.cc
# (computed from the generator alone), and no run may restart.
#
# Usage: tests/chaos/nexmark_determinism.sh [reps] [build-dir]
#   reps: repetitions of the six (query, backend) runs (default 34: 204 runs, 34 per pair)
#   env JOBHOST_NEXMARK_EVENTS (default 150000), JOBHOST_NEXMARK_RATE (default 10000),
#   JOBHOST_NEXMARK_INTERVAL_MS (default 1000): the bench's N rows' settings, under which
#   NexmarkQ5 on RocksDB printed a window twice in about 1 run of 10 before the fix.
# The short form (one repetition, small) runs in the README's ctest.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPS=${1:-34}
BUILD=${2:-build}
export JOBHOST_NEXMARK_REPS=$REPS
export JOBHOST_NEXMARK_EVENTS=${JOBHOST_NEXMARK_EVENTS:-150000}
export JOBHOST_NEXMARK_RATE=${JOBHOST_NEXMARK_RATE:-10000}
export JOBHOST_NEXMARK_INTERVAL_MS=${JOBHOST_NEXMARK_INTERVAL_MS:-1000}
start=$SECONDS
"$BUILD/tests/jobhost_e2e_tests" --gtest_filter='Nexmark.RepeatedRuns*' --gtest_brief=1
echo "== nexmark determinism: $((REPS * 6)) runs ($JOBHOST_NEXMARK_EVENTS events at $JOBHOST_NEXMARK_RATE/s," \
  "checkpoints every $JOBHOST_NEXMARK_INTERVAL_MS ms) in $((SECONDS - start)) s"
