#!/usr/bin/env bash
# tests/chaos/exactly_once.sh [kills] — the exactly-once oracle of the file sink (issue 15).
#
# For each configuration — hashmap and rocksdb incremental at parallelism 1 and 2, hashmap
# with incremental checkpoints at parallelism 2, and a rescaling one (hashmap incremental)
# whose runs alternate parallelism 2, 3 and 1 — it runs WordCount with
# `--output DIR` (the transactional file sink) over a throttled input, waits for a
# checkpoint of the run, sleeps a random moment, SIGKILLs the whole process tree
# (supervisor and worker: mid-write, mid-pre-commit, mid-commit, mid-recovery) and
# restores the next run from the job directory the killed run wrote, into the same output
# directory; `kills` times (default 10), then a last run to the end. The oracle: the
# committed part files together hold exactly the lines of an uninterrupted run — WordCount
# prints (word,n) for the n-th occurrence of each word, so every (word,n) exactly once —
# and no hidden in-progress or pre-committed file is left.
#
# Environment: JOBHOST, JOBHOST_PLUGIN (default: the build tree's), SEED (default random;
# printed, so a failure can be repeated), CONFIGS (default: all six), KEEP=1 keeps the
# work directory. Exit 0 if every configuration passed.
set -euo pipefail

kills=${1:-10}
here=$(cd "$(dirname "$0")/../.." && pwd)
jobhost=${JOBHOST:-$here/build/host/jobhost}
plugin=${JOBHOST_PLUGIN:-$here/build/plugins/libwordcount_jobs.so}
configs=${CONFIGS:-"hashmap-p1 hashmap-p2 hashmap-incremental-p2 rocksdb-p1 rocksdb-p2 rescale"}
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_setup exactly-once
trap remove_work EXIT
echo "exactly-once oracle: $kills kills per configuration, SEED=$seed, work in $work"

# The input: the bundled words, 150 times (2100 lines: 10.5 s at the 200 lines/s the
# killed runs read, more than the kills take); and what an uninterrupted WordCount writes.
input=$work/input.txt
for _ in $(seq 150); do cat "$here/plugins/wordcount/data/words.txt"; done >"$input"
expected=$work/expected.txt
tr -s '[:space:]' '\n' <"$input" | tr '[:upper:]' '[:lower:]' | grep -v '^$' |
  awk '{ n[$0]++; print "(" $0 "," n[$0] ")" }' | sort >"$expected"

# run_config NAME: the kill loop of one configuration.
run_config() {
  local name=$1 backend=() p=2
  case $name in
    hashmap-p1) p=1 ;;
    hashmap-p2) p=2 ;;
    rocksdb-p1) p=1; backend=(-D state.backend.type=rocksdb -D state.backend.incremental=true) ;;
    rocksdb-p2) p=2; backend=(-D state.backend.type=rocksdb -D state.backend.incremental=true) ;;
    hashmap-incremental-p2) p=2; backend=(-D state.backend.incremental=true) ;;
    rescale) p=2; backend=(-D state.backend.incremental=true) ;;
    *) fail "unknown configuration $name" ;;
  esac
  local dir=$work/$name ck=$work/$name/checkpoints out=$work/$name/out prev="" t0=$SECONDS
  mkdir -p "$dir" "$out"
  local -a ps=(2 3 1)
  local finished=0
  for ((i = 1; i <= kills; i++)); do
    [ "$name" = rescale ] && p=${ps[$(((i - 1) % 3))]}
    local -a args=(run -c WordCount -p "$p" -D "state.checkpoints.dir=$ck" -D execution.checkpointing.interval=50ms
                   -D state.checkpoints.num-retained=2 "${backend[@]}")
    [ -n "$prev" ] && args+=(-s "$prev")
    local before
    before=$(ls "$ck" 2>/dev/null | tr '\n' ' ' || true)  # one line: the case below matches " name "
    setsid "$jobhost" "${args[@]}" "$plugin" --input "$input" --rate 200 --output "$out" 2>"$dir/err.$i" &
    local pid=$! mine
    mine=$(job_dir_of_run "$ck" "$before" "$pid")
    if [ -z "$mine" ]; then
      # It ended by itself (the input ran out): fine if it finished, the kills are over.
      if wait "$pid" && grep -q "finished" "$dir/err.$i"; then finished=1; break; fi
      tail -20 "$dir/err.$i" >&2
      fail "$name run $i wrote no checkpoint"
    fi
    kill_tree "$pid"
    prev=$mine
  done
  [ "$name" = rescale ] && p=2
  [ "$finished" = 1 ] || "$jobhost" run -s "$prev" -c WordCount -p "$p" -D "state.checkpoints.dir=$ck" -D execution.checkpointing.interval=200ms \
    "${backend[@]}" "$plugin" --input "$input" --output "$out" 2>"$dir/err.final" ||
    { tail -20 "$dir/err.final" >&2; fail "$name: the final run failed"; }
  check_committed "$name" "$out" "$expected" "$dir/committed.txt"  # the oracle: the uninterrupted run's lines
  echo "  $name: $((i - 1)) kills, $(wc -l <"$dir/committed.txt") lines committed exactly once, $((SECONDS - t0)) s"
}

for c in $configs; do run_config "$c"; done
echo "PASS: exactly once in every configuration (SEED=$seed)"
