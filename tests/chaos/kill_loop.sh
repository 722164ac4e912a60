#!/usr/bin/env bash
# tests/chaos/kill_loop.sh [iterations] — kill -9 at scale (issue 12, item 8).
#
# For the hashmap and the rocksdb incremental backend at parallelism 2, and for two
# oracles — WordCount (exact final counts, and every intermediate count printed at least
# once across the runs) and SequenceChecker (every key's sequence
# arrives gap- and repeat-free, exactly once in state) — it runs the job, waits for a
# checkpoint of this run, sleeps a random moment, SIGKILLs the whole process tree
# (supervisor and worker, mid-alignment, mid-upload, mid-publication, mid-subsumption),
# and restores the next run from the job directory the killed run wrote. After every
# kill:
#   - `jobhost check` of the newest complete checkpoint passes (every file it references
#     exists with its recorded size, and it fits the class);
#   - `jobhost gc --dry-run` lists nothing a complete checkpoint references, and after a
#     real `gc` every complete checkpoint still passes `jobhost check`.
# A last run goes to the end of the input, then the oracle decides.
#
# CONFIGS=s3-outages (issue 31): WordCount at p=2 with checkpoints on a private Ceph RGW
# (tests/s3/rgw.sh) behind tests/s3/fault_proxy.py, whose outages (503 for everything,
# connection resets, slow answers, HEAD answered 503, lease-only 503) come and go at random
# while the job runs; each run is killed at a random moment (often mid-outage) and the next
# one restores with --job-id/--restore latest, waiting for the store when it is down. The
# output goes to the exactly-once file sink: the committed lines must be exactly those of an
# uninterrupted run (nothing lost, nothing twice). Exit 77 (skipped) without Ceph, unless
# JOBHOST_REQUIRE_S3=1.
#
# Environment: JOBHOST (binary, default build/host/jobhost), JOBHOST_PLUGIN (default
# build/plugins/libwordcount_jobs.so), SEED (default: random; printed, so a failure can be
# repeated), CONFIGS (default "hashmap rocksdb-incremental"; also "s3-outages"), KEEP=1
# keeps the work directory. Exit 0 if every check passed.
set -euo pipefail

iterations=${1:-20}
here=$(cd "$(dirname "$0")/../.." && pwd)
jobhost=${JOBHOST:-$here/build/host/jobhost}
plugin=${JOBHOST_PLUGIN:-$here/build/plugins/libwordcount_jobs.so}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_setup kill-loop
trap remove_work EXIT
echo "kill loop: $iterations iterations per configuration, SEED=$seed, work in $work"

# loop NAME CLASS JOBARGS... : runs the kill loop for one configuration.
loop() {
  local name=$1 cls=$2
  shift 2
  local -a flags=("${backend_flags[@]}")
  local dir=$work/$name ck=$work/$name/checkpoints prev="" kills=0 checks=0
  mkdir -p "$dir"
  local t0=$SECONDS
  for ((i = 1; i <= iterations; i++)); do
    local -a args=(run -c "$cls" -p 2 -D "state.checkpoints.dir=$ck" -D execution.checkpointing.interval=50ms
                   -D state.checkpoints.num-retained=2 "${flags[@]}")
    [ -n "$prev" ] && args+=(-s "$prev")
    local before
    before=$(ls "$ck" 2>/dev/null | tr '\n' ' ' || true)  # one line: the case below matches " name "
    setsid "$jobhost" "${args[@]}" "$plugin" "$@" --rate "$rate" --output-file "$dir/out.$i" 2>"$dir/err.$i" &
    local pid=$! mine
    mine=$(job_dir_of_run "$ck" "$before" "$pid")  # this run's first complete checkpoint
    [ -n "$mine" ] || { cat "$dir/err.$i" >&2; fail "$name run $i wrote no checkpoint"; }
    kill_tree "$pid"  # nothing of that job runs after this (the worker dies with its supervisor)
    kills=$((kills + 1))
    local newest
    newest=$(newest_checkpoint "$mine")
    "$jobhost" check -s "$newest" -c "$cls" -p 2 "${flags[@]}" "$plugin" "$@" >"$dir/check.$i" 2>&1 ||
      { cat "$dir/check.$i" >&2; fail "$name kill $i: jobhost check of $newest failed"; }
    # gc --dry-run must list nothing a complete checkpoint references.
    local referenced=$dir/referenced.$i listed=$dir/gc.$i
    : >"$referenced"
    for c in "$mine"/chk-*; do
      [ -f "$c/_metadata" ] || continue
      "$jobhost" inspect --json "$c" | grep -o '"path":"[^"]*"' | cut -d'"' -f4 >>"$referenced" || true
    done
    "$jobhost" gc --dry-run "$mine" >"$listed" 2>&1 || { cat "$listed" >&2; fail "$name kill $i: gc --dry-run failed"; }
    # The PATH column of the table (the last field of its rows), compared whole.
    awk 'NR > 1 && $NF ~ /^\// { print $NF }' "$listed" >"$listed.paths"
    while read -r f; do
      [ -n "$f" ] || continue
      if grep -qxF -- "$f" "$listed.paths"; then fail "$name kill $i: gc would remove $f, which a complete checkpoint references"; fi
    done <"$referenced"
    "$jobhost" gc "$mine" >>"$listed" 2>&1 || { cat "$listed" >&2; fail "$name kill $i: gc failed"; }
    for c in "$mine"/chk-*; do
      [ -f "$c/_metadata" ] || continue
      "$jobhost" check -s "$c" -c "$cls" -p 2 "${flags[@]}" "$plugin" "$@" >/dev/null 2>&1 ||
        fail "$name kill $i: $c no longer passes jobhost check after gc"
      checks=$((checks + 1))
    done
    prev=$mine
  done
  # To the end, without throttling.
  "$jobhost" run -s "$prev" -c "$cls" -p 2 -D "state.checkpoints.dir=$ck" -D execution.checkpointing.interval=200ms \
    "${flags[@]}" "$plugin" "$@" --output-file "$dir/out.final" 2>"$dir/err.final" ||
    { tail -20 "$dir/err.final" >&2; fail "$name: the final run failed"; }
  echo "  $name: $kills kills, $checks checkpoint checks after gc, $((SECONDS - t0)) s"
}

# Oracles.
check_counts() {  # DIR INPUT: the highest count printed per word equals the word's count in INPUT
  local expected actual
  expected=$(tr -s '[:space:]' '\n' <"$2" | tr '[:upper:]' '[:lower:]' | grep -v '^$' | sort | uniq -c |
             awk '{print $2 "\t" $1}' | sort)
  # "(word,3)" or "2> (word,3)"; a word may itself contain commas: the count follows the last.
  actual=$(cat "$1"/out.* | sed -E 's/^[0-9]+> //; s/^\((.*),([0-9]+)\)$/\1\t\2/' |
           awk -F'\t' '{ if ($2 + 0 > max[$1]) max[$1] = $2 + 0 } END { for (w in max) print w "\t" max[w] }' | sort)
  [ "$expected" = "$actual" ] || { diff <(echo "$expected") <(echo "$actual") | head >&2; fail "$3: final counts differ"; }
  # At-least-once output: every count of every word was printed by some run (a line
  # buffered before a completed checkpoint and lost in a kill would leave a gap).
  local gap
  gap=$(cat "$1"/out.* | sed -E 's/^[0-9]+> //; s/^\((.*),([0-9]+)\)$/\1\t\2/' |
        awk -F'\t' '{ seen[$1 SUBSEP ($2 + 0)] = 1; if ($2 + 0 > max[$1]) max[$1] = $2 + 0 }
                    END { for (w in max) for (i = 1; i <= max[w]; i++) if (!((w SUBSEP i) in seen)) { print w " " i; exit } }')
  [ -z "$gap" ] || fail "$3: the line for count $gap was never printed (output lost across a kill)"
}
check_sequences() {  # DIR KEYS NAME: no ALERT, and every key reached its end
  if cat "$1"/out.* | grep -q ALERT; then cat "$1"/out.* | grep ALERT | head >&2; fail "$3: gaps or repeats"; fi
  local done
  done=$(cat "$1"/out.* | grep -c '^\(.*> \)\?DONE key' || true)
  [ "$done" -ge "$2" ] || fail "$3: only $done of $2 keys reached their last record"
}

lines=$((iterations * 1500 + 20000))
rate=4000
words=$work/words.txt
cp "$here/plugins/wordcount/data/words.txt" "$words"
while [ "$(wc -l <"$words")" -lt "$lines" ]; do cat "$words" "$words" >"$words.tmp" && mv "$words.tmp" "$words"; done
keys=16
per_key=$(((iterations * 1500 + 20000) / keys))

# The S3 configuration with random outages (see the top).
s3_outages() {
  local dir=$work/s3-outages out=$work/s3-outages/out rgwdir=$work/rgw t0=$SECONDS env rc=0
  mkdir -p "$dir" "$out"
  env=$(bash "$here/tests/s3/rgw.sh" start "$rgwdir" 2>"$dir/rgw.err") || rc=$?
  if [ $rc -ne 0 ]; then
    if [ $rc = 3 ] && [ "${JOBHOST_REQUIRE_S3:-0}" != 1 ]; then
      echo "  s3-outages: skipped, no Ceph RGW here (apt-get install ceph-mon ceph-osd radosgw ceph-common)"
      exit 77
    fi
    cat "$dir/rgw.err" >&2
    fail "s3-outages: cannot start Ceph RGW"
  fi
  eval "$env"
  stop_rgw() { bash "$here/tests/s3/rgw.sh" stop "$rgwdir" >/dev/null 2>&1 || true; }
  local ctl=$dir/outage
  echo up >"$ctl"
  python3 "$here/tests/s3/fault_proxy.py" "$S3_ENDPOINT" none "$dir/proxy.port" "$ctl" >"$dir/proxy.log" 2>&1 &
  local proxy=$!
  for _ in $(seq 100); do [ -s "$dir/proxy.port" ] && break; sleep 0.05; done
  [ -s "$dir/proxy.port" ] || { kill $proxy; stop_rgw; fail "s3-outages: the fault proxy did not start"; }
  export AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET_KEY
  local -a flags=(-p 2 -D "state.checkpoints.dir=s3://$S3_BUCKET/kill-loop-$seed" -D "s3.endpoint=http://127.0.0.1:$(cat "$dir/proxy.port")"
                  -D s3.path.style.access=true -D execution.checkpointing.interval=200ms
                  -D state.backend.type=rocksdb -D state.backend.incremental=true)
  # Outages at random: a mode for 0.3-2.9 s, then up for 0.3-2.9 s, until stopped.
  (
    modes=(503 reset slow-1 503:/.lock 500-put head-no-length)
    while :; do
      echo "${modes[$((RANDOM % ${#modes[@]}))]}" >"$ctl.tmp" && mv "$ctl.tmp" "$ctl"
      sleep "$((RANDOM % 3)).$((RANDOM % 7 + 3))"
      echo up >"$ctl.tmp" && mv "$ctl.tmp" "$ctl"
      sleep "$((RANDOM % 3)).$((RANDOM % 7 + 3))"
    done
  ) &
  local chaos=$! kills=0 waited
  for ((i = 1; i <= iterations; i++)); do
    setsid "$jobhost" run --job-id kill-loop --restore latest -c WordCount "${flags[@]}" "$plugin" --input "$words" \
      --rate "$rate" --output "$out" 2>"$dir/err.$i" &
    local pid=$!
    # Until this run completed a checkpoint (or 40 s: the store may be down all along).
    for ((waited = 0; waited < 800; waited++)); do
      grep -q "completed checkpoint" "$dir/err.$i" 2>/dev/null && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -0 "$pid" 2>/dev/null || { kill $chaos $proxy; stop_rgw; tail -20 "$dir/err.$i" >&2; fail "s3-outages run $i ended by itself"; }
    kill_tree "$pid"
    kills=$((kills + 1))
  done
  kill $chaos 2>/dev/null || true
  wait $chaos 2>/dev/null || true
  # The last run starts in an outage, which ends after 3 s; it must wait, then finish.
  echo 503 >"$ctl"
  ( sleep 3; echo up >"$ctl" ) &
  "$jobhost" run --job-id kill-loop --restore latest -c WordCount "${flags[@]}" "$plugin" --input "$words" \
    --output "$out" 2>"$dir/err.final" ||
    { kill $proxy; stop_rgw; tail -20 "$dir/err.final" >&2; fail "s3-outages: the final run failed"; }
  kill $proxy 2>/dev/null || true
  stop_rgw
  local injected
  injected=$(grep -c "^injected" "$dir/proxy.log" || true)
  [ "$injected" -gt 0 ] || fail "s3-outages: no fault was injected"
  # The oracle: the committed lines are exactly those of an uninterrupted run.
  tr -s '[:space:]' '\n' <"$words" | tr '[:upper:]' '[:lower:]' | grep -v '^$' |
    awk '{ n[$0]++; print "(" $0 "," n[$0] ")" }' | sort >"$dir/expected.txt"
  check_committed s3-outages "$out" "$dir/expected.txt" "$dir/committed.txt"
  echo "  s3-outages: $kills kills during random outages ($injected faults injected), exact committed output, $((SECONDS - t0)) s"
}

for config in ${CONFIGS:-hashmap rocksdb-incremental}; do
  if [ "$config" = s3-outages ]; then
    echo "$config:"
    s3_outages
    continue
  fi
  if [ $config = hashmap ]; then backend_flags=(-D state.backend.type=hashmap)
  else backend_flags=(-D state.backend.type=rocksdb -D state.backend.incremental=true); fi
  echo "$config:"
  loop "wc-$config" WordCount --input "$words"
  check_counts "$work/wc-$config" "$words" "wc-$config"
  loop "seq-$config" SequenceChecker --keys "$keys" --per-key "$per_key"
  check_sequences "$work/seq-$config" "$keys" "seq-$config"
done
echo "kill loop passed (SEED=$seed)"
