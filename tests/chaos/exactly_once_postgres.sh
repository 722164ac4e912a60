#!/usr/bin/env bash
# tests/chaos/exactly_once_postgres.sh [kills] — the exactly-once oracle of the PostgreSQL
# sink (issue 15), the sibling of exactly_once.sh (the file sink's).
#
# It starts a private PostgreSQL server (tests/support/postgres_server.h through its
# command-line helper jobhost-test-postgres: initdb into a temporary directory, a Unix
# socket only, max_prepared_transactions = 20), runs WordCountToPostgres once without
# interruption into a reference table, and then, for each configuration — hashmap and
# rocksdb incremental at parallelism 1 and 2, a rescaling one (hashmap with incremental
# checkpoints) whose runs alternate parallelism 2, 3 and 1, and append-p2 (hashmap, p=2, --append: every (word, n) update a
# row of a table without key) — runs it over a throttled input into a table of its own, waits
# for a checkpoint of the run, sleeps a random moment, SIGKILLs the whole process tree
# (mid-write, mid-prepare, mid-commit, mid-recovery) and restores the next run from the
# job directory the killed run wrote; `kills` times (default 10), then a last run to the
# end. The oracle: the final table equals the uninterrupted run's (which equals the
# input's word counts) — for append-p2, holds (word, n) exactly once for n = 1 .. the
# word's count — and no prepared transaction is left in the configuration's database.
#
# Environment: JOBHOST, JOBHOST_PLUGIN, JOBHOST_TEST_POSTGRES (default: the build tree's),
# SEED (default random; printed, so a failure can be repeated), CONFIGS (default: all
# six), KEEP=1 keeps the work directory and the server, JOBHOST_REQUIRE_POSTGRES=1 makes a
# missing PostgreSQL a failure. Exit 0 if every configuration passed, 77 if PostgreSQL is
# not installed (ctest: skipped), 1 otherwise.
set -euo pipefail

kills=${1:-10}
here=$(cd "$(dirname "$0")/../.." && pwd)
jobhost=${JOBHOST:-$here/build/host/jobhost}
plugin=${JOBHOST_PLUGIN:-$here/build/plugins/libwordcount_jobs.so}
pg=${JOBHOST_TEST_POSTGRES:-$here/build/tests/jobhost-test-postgres}
configs=${CONFIGS:-"hashmap-p1 hashmap-p2 rocksdb-p1 rocksdb-p2 rescale append-p2"}

if ! why=$("$pg" check); then
  if [ "${JOBHOST_REQUIRE_POSTGRES:-0}" = 1 ]; then
    echo "FAILED: JOBHOST_REQUIRE_POSTGRES=1, but no PostgreSQL server can run here: $why" >&2
    exit 1
  fi
  echo "SKIPPED: $why"
  exit 77
fi

# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
chaos_setup exactly-once-pg
server=""
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "kept $work${server:+ and the server in $server}"
  else
    [ -z "$server" ] || "$pg" remove "$server" || true
    rm -rf "$work"
  fi
}
trap cleanup EXIT
server=$("$pg" start --max-prepared 20)
echo "exactly-once oracle (PostgreSQL): $kills kills per configuration, SEED=$seed, work in $work, server in $server"

sql() { "$pg" sql "$server" "$1" "$2"; }  # sql DB STATEMENT: rows, tab-separated
new_database() {
  sql postgres "DROP DATABASE IF EXISTS $1" >/dev/null
  sql postgres "CREATE DATABASE $1" >/dev/null
  sql "$1" "CREATE TABLE word_counts (word text PRIMARY KEY, count bigint NOT NULL)" >/dev/null
  sql "$1" "CREATE TABLE word_updates (word text NOT NULL, count bigint NOT NULL)" >/dev/null
}
table_of() { sql "$1" "SELECT word, count FROM word_counts ORDER BY word COLLATE \"C\""; }
# Every (word, n) update the job emitted, appended (--append; configuration append-p2): the
# upsert's final table would hide an update written twice.
log_of() { sql "$1" "SELECT word, count FROM word_updates ORDER BY word COLLATE \"C\", count"; }

# The input: the bundled words, 150 times (2100 lines: 10.5 s at the 200 lines/s the
# killed runs read, more than the kills take).
input=$work/input.txt
for _ in $(seq 150); do cat "$here/plugins/wordcount/data/words.txt"; done >"$input"

# The uninterrupted run, and the input's word counts it must equal.
new_database reference
"$jobhost" run -c WordCountToPostgres -D "state.checkpoints.dir=$work/reference-checkpoints" "$plugin" \
  --postgres "$("$pg" conninfo "$server" reference)" --table word_counts --input "$input" 2>"$work/reference.err" ||
  { tail -20 "$work/reference.err" >&2; fail "the uninterrupted run failed"; }
expected=$work/expected.txt
table_of reference >"$expected"
tr -s '[:space:]' '\n' <"$input" | tr '[:upper:]' '[:lower:]' | grep -v '^$' | LC_ALL=C sort | uniq -c |
  awk '{ printf "%s\t%s\n", $2, $1 }' >"$work/counted.txt"
cmp -s "$expected" "$work/counted.txt" ||
  { diff "$work/counted.txt" "$expected" | head >&2; fail "the uninterrupted run's table is not the input's word counts"; }
# What append-p2's table must hold: (word, n) once for n = 1 .. the word's count.
expected_log=$work/expected-log.txt
awk -F'\t' '{ for (n = 1; n <= $2; n++) printf "%s\t%d\n", $1, n }' "$work/counted.txt" |
  LC_ALL=C sort -t$'\t' -k1,1 -k2,2n >"$expected_log"

# run_config NAME: the kill loop of one configuration, into database NAME (as an identifier).
run_config() {
  local name=$1 backend=() p=2 mode=(--table word_counts)
  case $name in
    append-p2) p=2; mode=(--table word_updates --append) ;;
    hashmap-p1) p=1 ;;
    hashmap-p2) p=2 ;;
    rocksdb-p1) p=1; backend=(-D state.backend.type=rocksdb -D state.backend.incremental=true) ;;
    rocksdb-p2) p=2; backend=(-D state.backend.type=rocksdb -D state.backend.incremental=true) ;;
    rescale) p=2; backend=(-D state.backend.incremental=true) ;;
    *) fail "unknown configuration $name" ;;
  esac
  local db=${name//-/_} dir=$work/$name ck=$work/$name/checkpoints prev="" t0=$SECONDS
  mkdir -p "$dir"
  new_database "$db"
  local conninfo
  conninfo=$("$pg" conninfo "$server" "$db")
  local -a ps=(2 3 1)
  local finished=0 prepared_seen=0
  for ((i = 1; i <= kills; i++)); do
    [ "$name" = rescale ] && p=${ps[$(((i - 1) % 3))]}
    local -a args=(run -c WordCountToPostgres -p "$p" -D "state.checkpoints.dir=$ck"
                   -D execution.checkpointing.interval=50ms -D state.checkpoints.num-retained=2 "${backend[@]}")
    [ -n "$prev" ] && args+=(-s "$prev")
    local before
    before=$(ls "$ck" 2>/dev/null | tr '\n' ' ' || true)  # one line: the case below matches " name "
    setsid "$jobhost" "${args[@]}" "$plugin" --postgres "$conninfo" "${mode[@]}" --input "$input" --rate 200 \
      2>"$dir/err.$i" &
    local pid=$! mine
    mine=$(job_dir_of_run "$ck" "$before" "$pid")
    if [ -z "$mine" ]; then
      # It ended by itself (the input ran out): fine if it finished, the kills are over.
      if wait "$pid" && grep -q "finished" "$dir/err.$i"; then finished=1; break; fi
      tail -20 "$dir/err.$i" >&2
      fail "$name run $i wrote no checkpoint"
    fi
    kill_tree "$pid"
    [ -n "$(sql "$db" "SELECT gid FROM pg_prepared_xacts WHERE database = '$db'")" ] && prepared_seen=$((prepared_seen + 1))
    prev=$mine
  done
  [ "$name" = rescale ] && p=2
  [ "$finished" = 1 ] || "$jobhost" run -s "$prev" -c WordCountToPostgres -p "$p" -D "state.checkpoints.dir=$ck" \
    -D execution.checkpointing.interval=200ms "${backend[@]}" "$plugin" --postgres "$conninfo" "${mode[@]}" \
    --input "$input" 2>"$dir/err.final" ||
    { tail -20 "$dir/err.final" >&2; fail "$name: the final run failed"; }
  # The oracle.
  local left
  left=$(sql "$db" "SELECT gid FROM pg_prepared_xacts WHERE database = '$db'")
  [ -z "$left" ] || fail "$name: prepared transactions are left after a clean finish: $left"
  local got=$dir/table.txt want=$expected what="final table"
  if [ "$name" = append-p2 ]; then
    log_of "$db" >"$got"
    want=$expected_log what="appended (word, n) rows, each update once,"
  else
    table_of "$db" >"$got"
  fi
  if ! cmp -s "$want" "$got"; then
    echo "rows expected (<) and of this run (>) that differ, first ones:" >&2
    diff "$want" "$got" | grep '^[<>]' | head >&2 || true
    fail "$name: the $what is not the uninterrupted run's"
  fi
  echo "  $name: $((i - 1)) kills ($prepared_seen with prepared transactions left to recover), $(wc -l <"$dir/table.txt") rows exact, $((SECONDS - t0)) s"
}

for c in $configs; do run_config "$c"; done
echo "PASS: the PostgreSQL tables (upserted, and appended in append-p2) are exactly the uninterrupted run's in every configuration (SEED=$seed)"
