#!/usr/bin/env bash
# tests/chaos/kafka_kill_loop.sh [iterations] — kill -9 at random moments, Kafka in and out
# (issue 32).
#
# A mock Kafka cluster (jobhost-test-kafka) holds an 8-partition input topic that a
# background producer (kcat, the independent client) fills while WordCount reads it
# (unbounded) and writes its counts to an output topic. Each run restores the previous
# one's job directory at a parallelism drawn from 1, 2 and 3, waits for a checkpoint of its
# own, sleeps a random moment and is killed with kill -9 (supervisor and worker). After
# every kill the newest checkpoint passes `jobhost check`. A last run reads to the end of
# the input (its checkpoint's offsets, from `jobhost inspect --json`, reach every
# partition's end offset), then stops. The oracle reads the output topic with kcat:
#   - the highest count of every word equals its count in the input: every offset was
#     counted into state exactly once, whatever the kills and rescalings;
#   - every count 1..N of every word was written at least once: no record lost.
# Both for --kafka-delivery at-least-once and exactly-once. (The mock shows aborted
# transactions' records too, so duplicates in the output are not checked: see README.)
#
# Environment: JOBHOST, JOBHOST_PLUGIN, JOBHOST_TEST_KAFKA (binaries, default under build/),
# SEED (default random; printed), CONFIGS (default "at-least-once exactly-once"), KEEP=1
# keeps the work directory. Exit 0 if every check passed, 77 (skipped) without kcat unless
# JOBHOST_REQUIRE_KAFKA=1.
set -euo pipefail

iterations=${1:-10}
here=$(cd "$(dirname "$0")/../.." && pwd)
jobhost=${JOBHOST:-$here/build/host/jobhost}
plugin=${JOBHOST_PLUGIN:-$here/build/plugins/libwordcount_jobs.so}
mock=${JOBHOST_TEST_KAFKA:-$here/build/tests/jobhost-test-kafka}
if ! command -v kcat >/dev/null; then
  if [ "${JOBHOST_REQUIRE_KAFKA:-0}" = 1 ]; then echo "FAILED: JOBHOST_REQUIRE_KAFKA=1 but kcat is not installed" >&2; exit 1; fi
  echo "skipped: kcat is not installed (apt-get install kcat)"
  exit 77
fi
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_setup kafka-kill
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  exec 3>&- 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
echo "kafka kill loop: $iterations iterations per configuration, SEED=$seed, work in $work"

# The cluster: its commands come through a FIFO this script keeps open (fd 3).
mkfifo "$work/mock.in"
"$mock" --topic words-at-least-once:8 --topic words-exactly-once:8 --topic out-at-least-once:8 \
  --topic out-exactly-once:8 <"$work/mock.in" >"$work/mock.out" 2>"$work/mock.err" &
pids+=($!)
exec 3>"$work/mock.in"
for _ in $(seq 100); do grep -q BOOTSTRAP= "$work/mock.out" 2>/dev/null && break; sleep 0.05; done
bootstrap=$(sed -n 's/^BOOTSTRAP=//p' "$work/mock.out")
[ -n "$bootstrap" ] || fail "the mock cluster did not start: $(cat "$work/mock.err")"

# The input: words.txt repeated, one record per line.
lines=$((iterations * 3000 + 3000))
words=$work/words.txt
cp "$here/plugins/wordcount/data/words.txt" "$words"
while [ "$(wc -l <"$words")" -lt "$lines" ]; do cat "$words" "$words" >"$words.tmp" && mv "$words.tmp" "$words"; done
head -n "$lines" "$words" >"$words.tmp" && mv "$words.tmp" "$words"

# produce TOPIC: writes the input into TOPIC in chunks (random partitions), paced so that
# it lasts about as long as the kill loop (about 1.5 s an iteration).
produce() {
  local topic=$1 chunk=$((lines / (iterations * 8 + 1) + 1)) start=1
  while [ "$start" -le "$lines" ]; do
    sed -n "${start},$((start + chunk - 1))p" "$words" | kcat -P -b "$bootstrap" -t "$topic" -p -1 ||
      { echo "kcat could not produce" >&2; return 1; }
    start=$((start + chunk))
    sleep 0.15
  done
}

# end_offsets TOPIC: the sum of the end offsets of its 8 partitions.
end_offsets() {
  local sum=0 p o
  for p in 0 1 2 3 4 5 6 7; do
    o=$(kcat -b "$bootstrap" -Q -t "$1:$p:-1" | sed -n 's/.* offset //p')
    sum=$((sum + o))
  done
  echo "$sum"
}
# checkpoint_offsets CHK: the sum of the next offsets its Kafka source recorded.
checkpoint_offsets() {
  "$jobhost" inspect --json "$1" 2>/dev/null | grep -o '"offset":[0-9]*' | cut -d: -f2 | awk '{ s += $1 } END { print s + 0 }'
}

loop() {
  local g=$1 dir=$work/$1 ck=$work/$1/checkpoints prev="" kills=0 t0=$SECONDS
  mkdir -p "$dir"
  local -a job=(--kafka-bootstrap "$bootstrap" --topic "words-$g" --kafka-output "out-$g" --kafka-delivery "$g"
                --kafka-transactional-id-prefix "kill-loop-$g-$seed")
  produce "words-$g" &
  local producer=$!
  pids+=("$producer")
  for ((i = 1; i <= iterations; i++)); do
    local p=$((RANDOM % 3 + 1))
    local -a args=(run -c WordCount -p "$p" -D "state.checkpoints.dir=$ck" -D execution.checkpointing.interval=100ms
                   -D state.checkpoints.num-retained=2 -D restart-strategy.type=none)
    [ -n "$prev" ] && args+=(-s "$prev")
    local before
    before=$(ls "$ck" 2>/dev/null | tr '\n' ' ' || true)
    setsid "$jobhost" "${args[@]}" "$plugin" "${job[@]}" >"$dir/out.$i" 2>"$dir/err.$i" &
    local pid=$! mine
    mine=$(job_dir_of_run "$ck" "$before" "$pid")
    [ -n "$mine" ] || { tail -20 "$dir/err.$i" >&2; fail "$g run $i (p=$p) wrote no checkpoint"; }
    kill_tree "$pid"
    kills=$((kills + 1))
    local newest
    newest=$(newest_checkpoint "$mine")
    "$jobhost" check -s "$newest" -c WordCount -p "$p" "$plugin" "${job[@]}" >"$dir/check.$i" 2>&1 ||
      { cat "$dir/check.$i" >&2; fail "$g kill $i: jobhost check of $newest failed"; }
    prev=$mine
  done
  wait "$producer" || fail "$g: the producer failed"
  # To the end of the input, then stop.
  local p=$((RANDOM % 3 + 1)) before
  before=$(ls "$ck" 2>/dev/null | tr '\n' ' ' || true)
  setsid "$jobhost" run -s "$prev" -c WordCount -p "$p" -D "state.checkpoints.dir=$ck" \
    -D execution.checkpointing.interval=100ms -D restart-strategy.type=none "$plugin" "${job[@]}" \
    >"$dir/out.final" 2>"$dir/err.final" &
  local pid=$! mine want caught=""
  mine=$(job_dir_of_run "$ck" "$before" "$pid")
  [ -n "$mine" ] || { tail -20 "$dir/err.final" >&2; fail "$g: the final run wrote no checkpoint"; }
  want=$(end_offsets "words-$g")
  for _ in $(seq 600); do
    local c
    c=$(newest_checkpoint "$mine")
    if [ -n "$c" ] && [ "$(checkpoint_offsets "$c")" = "$want" ]; then caught=$c; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$caught" ] || { tail -20 "$dir/err.final" >&2; fail "$g: the final run did not reach the end of the input ($want records)"; }
  sleep 0.5  # the completed checkpoint's commit (exactly-once) or flush is done by then
  kill -TERM "$pid"
  wait "$pid" || [ $? = 130 ] || fail "$g: the final run did not stop cleanly"
  echo "  $g: $kills kills, parallelism changed between runs, $((SECONDS - t0)) s"
}

check_output() {  # GUARANTEE
  local expected actual gap
  expected=$(tr -s '[:space:]' '\n' <"$words" | tr '[:upper:]' '[:lower:]' | grep -v '^$' | sort | uniq -c |
             awk '{print $2 "\t" $1}' | sort)
  kcat -b "$bootstrap" -C -t "out-$1" -e -q -f '%s\n' >"$work/out-$1.txt"
  actual=$(sed -E 's/^\((.*),([0-9]+)\)$/\1\t\2/' "$work/out-$1.txt" |
           awk -F'\t' '{ if ($2 + 0 > max[$1]) max[$1] = $2 + 0 } END { for (w in max) print w "\t" max[w] }' | sort)
  [ "$expected" = "$actual" ] || { diff <(echo "$expected") <(echo "$actual") | head >&2; fail "$1: final counts differ"; }
  gap=$(sed -E 's/^\((.*),([0-9]+)\)$/\1\t\2/' "$work/out-$1.txt" |
        awk -F'\t' '{ seen[$1 SUBSEP ($2 + 0)] = 1; if ($2 + 0 > max[$1]) max[$1] = $2 + 0 }
                    END { for (w in max) for (i = 1; i <= max[w]; i++) if (!((w SUBSEP i) in seen)) { print w " " i; exit } }')
  [ -z "$gap" ] || fail "$1: the record for count $gap is not in the output topic (lost across a kill)"
}

for g in ${CONFIGS:-at-least-once exactly-once}; do
  echo "$g:"
  loop "$g"
  check_output "$g"
done
echo "kafka kill loop passed (SEED=$seed)"
