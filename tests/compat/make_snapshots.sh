#!/usr/bin/env bash
# tests/compat/make_snapshots.sh — produces the compatibility snapshots of the CURRENT
# metadata format version into a NEW directory (see tests/compat/README.md).
#
#   tests/compat/make_snapshots.sh build tests/compat/v2      # only for a new format version
#   tests/compat/make_snapshots.sh build tests/compat/v1 --only-new   # add snapshots of new state
#
# Each version directory holds the snapshots of its format version: v1/ everything that
# is written as version 1, v2/ the unaligned checkpoints' (in-flight records, version 2).
#
# It refuses to overwrite a snapshot: committed snapshots are never regenerated. With
# --only-new it writes the snapshots missing from an existing directory (new kinds of
# state written by the same metadata format version) and leaves the others alone.
# Each snapshot is a real run of the example plugin over the bundled inputs in
# plugins/wordcount/data/: word counts over words.txt, throttled (--rate 10: 14 lines in
# 1.4 s) so that checkpoints (every 500 ms) complete while the input is still being read;
# event-time jobs over events.txt, orders.txt and payments.txt (--rate 40), killed with
# SIGKILL half-way, so their last checkpoint holds open windows, pending timers and
# interval-join buffers.
set -euo pipefail
BUILD=${1:?usage: make_snapshots.sh BUILD_DIR OUT_DIR}
OUT=${2:?usage: make_snapshots.sh BUILD_DIR OUT_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
JOBHOST=$BUILD/host/jobhost
PLUGIN=$BUILD/plugins/libwordcount_jobs.so
WORDS=$ROOT/plugins/wordcount/data/words.txt
ONLY_NEW=${3:-}
if [ -e "$OUT" ] && [ "$ONLY_NEW" != --only-new ]; then
  echo "$OUT exists: committed snapshots are never regenerated; add a new version directory" >&2
  exit 1
fi
DATA=$ROOT/plugins/wordcount/data
# wanted NAME: true if snapshot NAME is to be written (never over an existing one) and
# belongs to OUT's format version (unaligned-*: v2, the others: v1).
#
# v1-kg2/ and v2-kg2/ (2026-12-07): the same metadata format versions with key-group
# files of format version 2 (a checksum per key group and for the header): every snapshot
# that holds key-group files (hashmap, rocksdb full, canonical savepoints), not those whose
# keyed state is RocksDB SSTs only (unchanged) nor the Kafka ones (the same key-group
# writer; they need librdkafka's mock cluster).
wanted() {
  case "$(basename "$OUT"):$1" in
    v2:unaligned-*) ;;
    v2-kg2:unaligned-hashmap-p1 | v2-kg2:unaligned-windowed-hashmap-p1) ;;
    v1-kg2:unaligned-* | v1-kg2:*rocksdb-incremental* | v1-kg2:kafka-*) return 1 ;;
    v1-kg2:*) ;;
    v2:* | v2-kg2:* | v1:unaligned-*) return 1 ;;
  esac
  [ ! -e "$OUT/$1" ]
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run NAME CLASS [-D ...]: runs CLASS over words.txt with checkpoints into $work/NAME and
# prints the job directory.
run() {
  local name=$1 cls=$2
  shift 2
  "$JOBHOST" run -c "$cls" "$@" -D "state.checkpoints.dir=$work/$name" -D execution.checkpointing.interval=500ms \
    "$PLUGIN" --input "$WORDS" --rate 10 >"$work/$name.out" 2>"$work/$name.err"
  local jobdir
  jobdir=$(ls -d "$work/$name"/*/)
  ls -d "$jobdir"chk-* >/dev/null  # at least one completed checkpoint
  echo "${jobdir%/}"
}

mkdir -p "$OUT"
# 1. hashmap backend: KeyGroupsStateHandle. The chk-<n> directory alone is the snapshot.
if wanted hashmap-keygroups; then
  j=$(run hashmap WordCount)
  cp -r "$(ls -d "$j"/chk-* | tail -1)" "$OUT/hashmap-keygroups"
fi
# 2. rocksdb full snapshots: KeyGroupsStateHandle written by the rocksdb backend.
if wanted rocksdb-full; then
  j=$(run rocksdb-full WordCountIncremental -D state.backend.incremental=false)
  cp -r "$(ls -d "$j"/chk-* | tail -1)" "$OUT/rocksdb-full"
fi
# 3. rocksdb incremental: IncrementalRemoteKeyedStateHandle; the whole job directory, so
#    shared/ (SSTs of earlier checkpoints) comes along. Paths in _metadata are relative
#    to the chk directory ("../shared/..."), so the copy restores where it lies.
# 4. a canonical savepoint converted from the incremental checkpoint.
if wanted rocksdb-incremental || wanted savepoint-canonical; then
  j=$(run rocksdb-incremental WordCountIncremental)
  if wanted rocksdb-incremental; then
    mkdir "$OUT/rocksdb-incremental"
    cp -r "$j" "$OUT/rocksdb-incremental/"
    rmdir "$OUT/rocksdb-incremental/$(basename "$j")/taskowned" 2>/dev/null || true
  fi
  if wanted savepoint-canonical; then
    "$JOBHOST" convert "$(ls -d "$j"/chk-* | tail -1)" "$OUT/savepoint-canonical" >/dev/null 2>&1
  fi
fi

# Event time (issue 14): window contents, window and join timers, the watermark
# generator's state, interval-join buffers; p=1 and p=2, both backends.
# half NAME CLASS SECONDS [flags...] -- [job args...]: runs CLASS with checkpoints every
# 500 ms (reading RATE lines/s, default 40) and kills it with SIGKILL after SECONDS;
# prints the job directory.
half() {
  local name=$1 cls=$2 secs=$3
  shift 3
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  timeout -s KILL "$secs" "$JOBHOST" run -c "$cls" "${flags[@]}" -D "state.checkpoints.dir=$work/$name" \
    -D execution.checkpointing.interval=500ms "$PLUGIN" "$@" --rate "${RATE:-40}" >"$work/$name.out" 2>"$work/$name.err" || true
  local jobdir
  jobdir=$(ls -d "$work/$name"/*/)
  ls -d "$jobdir"chk-* >/dev/null
  echo "${jobdir%/}"
}
events=(--input "$DATA/events.txt")
orders=(--orders "$DATA/orders.txt" --payments "$DATA/payments.txt")
if wanted windowed-hashmap-p1; then
  j=$(half windowed-hashmap WindowedWordCount 5 -- "${events[@]}")
  cp -r "$(ls -d "$j"/chk-* | tail -1)" "$OUT/windowed-hashmap-p1"
fi
if wanted windowed-rocksdb-incremental-p2 || wanted windowed-savepoint-canonical-p2; then
  j=$(half windowed-rocksdb WindowedWordCount 5 -p 2 -D state.backend.type=rocksdb -D state.backend.incremental=true \
    -- "${events[@]}")
  if wanted windowed-rocksdb-incremental-p2; then
    mkdir "$OUT/windowed-rocksdb-incremental-p2"
    cp -r "$j" "$OUT/windowed-rocksdb-incremental-p2/"
    rmdir "$OUT/windowed-rocksdb-incremental-p2/$(basename "$j")/taskowned" 2>/dev/null || true
    rm -f "$OUT/windowed-rocksdb-incremental-p2/$(basename "$j")/.lock"  # of the killed job
  fi
  if wanted windowed-savepoint-canonical-p2; then
    "$JOBHOST" convert "$(ls -d "$j"/chk-* | tail -1)" "$OUT/windowed-savepoint-canonical-p2" >/dev/null 2>&1
  fi
fi
if wanted join-hashmap-p2; then
  j=$(half join-hashmap OrderPaymentJoin 4 -p 2 -- "${orders[@]}")
  cp -r "$(ls -d "$j"/chk-* | tail -1)" "$OUT/join-hashmap-p2"
fi
if wanted join-rocksdb-full-p1; then
  j=$(half join-rocksdb OrderPaymentJoin 4 -D state.backend.type=rocksdb -- "${orders[@]}")
  cp -r "$(ls -d "$j"/chk-* | tail -1)" "$OUT/join-rocksdb-full-p1"
fi

# Hashmap incremental checkpoints (issue 16; IncrementalKeyGroupsStateHandle): the whole
# job directory, so shared/ (key-group files of earlier checkpoints) comes along. Value
# state (WordCount, p=1), list and map state with timers (WindowedWordCount, p=2), join
# buffers (OrderPaymentJoin, p=1). Read slowly (8 or 20 lines/s), so that a checkpoint changes
# few key groups and the last one reads files of earlier ones.
# keepjob NAME JOBDIR: copies a killed or ended job directory as snapshot NAME.
keepjob() {
  mkdir "$OUT/$1"
  cp -r "$2" "$OUT/$1/"
  rmdir "$OUT/$1/$(basename "$2")/taskowned" 2>/dev/null || true
  rm -f "$OUT/$1/$(basename "$2")/.lock"
}
if wanted hashmap-incremental-p1; then
  keepjob hashmap-incremental-p1 "$(run hashmap-incremental WordCount -D state.backend.incremental=true)"
fi
if wanted windowed-hashmap-incremental-p2; then
  keepjob windowed-hashmap-incremental-p2 \
    "$(RATE=20 half windowed-hashmap-incremental WindowedWordCount 8 -p 2 -D state.backend.incremental=true -- "${events[@]}")"
fi
if wanted join-hashmap-incremental-p1; then
  keepjob join-hashmap-incremental-p1 \
    "$(RATE=8 half join-hashmap-incremental OrderPaymentJoin 6 -D state.backend.incremental=true -- "${orders[@]}")"
fi

# Kafka (issue 32): a Kafka source's offsets per partition (operator state "jhkafka" v1,
# jobhost/kafka_splits.h) at p=1, and at p=2 with the exactly-once Kafka sink's state (its
# pre-committed transaction with the records it carries). Against librdkafka's mock
# cluster (jobhost-test-kafka; kcat produces): the first 7 lines of words.txt, line i into
# partition i % 4 of topic "words"; the job reads them (unbounded) and the first
# checkpoint that holds all 7 offsets is the snapshot. The compat test produces all 14
# lines the same way into a fresh mock and restores (tests/e2e/kafka_test.cc).
# kafka NAME [flags...] -- [job args...]: prints the checkpoint directory.
kafka() {
  local name=$1
  shift
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  mkfifo "$work/$name.mockin"
  "$BUILD/tests/jobhost-test-kafka" --topic words:4 --topic out:4 <"$work/$name.mockin" >"$work/$name.mock" 2>/dev/null &
  local mock=$!
  exec 4>"$work/$name.mockin"
  for _ in $(seq 100); do grep -q BOOTSTRAP= "$work/$name.mock" 2>/dev/null && break; sleep 0.05; done
  local b
  b=$(sed -n 's/^BOOTSTRAP=//p' "$work/$name.mock")
  for p in 0 1 2 3; do awk -v p=$p 'NR <= 7 && (NR - 1) % 4 == p' "$WORDS" | kcat -P -b "$b" -t words -p $p; done
  "$JOBHOST" run -c WordCount "${flags[@]}" -D "state.checkpoints.dir=$work/$name" -D execution.checkpointing.interval=2s \
    "$PLUGIN" --kafka-bootstrap "$b" --topic words "$@" >"$work/$name.out" 2>"$work/$name.err" &
  local job=$! chk=""
  for _ in $(seq 200); do
    for c in "$work/$name"/*/chk-*; do
      [ -f "$c/_metadata" ] || continue
      [ "$("$JOBHOST" inspect --json "$c" | grep -o '"offset":[0-9]*' | cut -d: -f2 | awk '{s+=$1} END {print s}')" = 7 ] &&
        chk=$c && break 2
    done
    sleep 0.1
  done
  kill -TERM $job; wait $job || true
  exec 4>&-
  wait $mock || true
  [ -n "$chk" ] || { echo "no checkpoint of $name holds the 7 offsets" >&2; exit 1; }
  echo "$chk"
}
if wanted kafka-hashmap-p1; then
  cp -r "$(kafka kafka-hashmap-p1 -p 1 --)" "$OUT/kafka-hashmap-p1"
fi
if wanted kafka-exactly-once-p2; then
  cp -r "$(kafka kafka-exactly-once-p2 -p 2 -- --kafka-output out --kafka-delivery exactly-once \
    --kafka-transactional-id-prefix compat)" "$OUT/kafka-exactly-once-p2"
fi
# Broadcast state (issue 33): WordThresholds' thresholds in the broadcast state of a keyed
# operator (operator state "thresholds" of its every subtask) next to its keyed counts and
# end-of-input timers, at p=1 (hashmap) and p=2 (rocksdb, incremental). The words are read
# at 10 lines/s and the rules at 4 lines/s, so the last checkpoint (before the words end)
# holds some rules and a rules position in the middle of rules.txt; killed after 3 s.
# bcast NAME [flags...]: prints the job directory.
bcast() {
  local name=$1
  shift
  timeout -s KILL 3 "$JOBHOST" run -c WordThresholds "$@" -D "state.checkpoints.dir=$work/$name" \
    -D execution.checkpointing.interval=500ms "$PLUGIN" --input "$WORDS" --rate 10 --rules "$DATA/rules.txt" \
    --rules-rate 4 >"$work/$name.out" 2>"$work/$name.err" || true
  local jobdir
  jobdir=$(ls -d "$work/$name"/*/)
  ls -d "$jobdir"chk-* >/dev/null
  echo "${jobdir%/}"
}
if wanted broadcast-hashmap-p1; then
  j=$(bcast broadcast-hashmap-p1)
  cp -r "$(ls -d "$j"/chk-* | sort -t- -k2 -n | tail -1)" "$OUT/broadcast-hashmap-p1"
fi
if wanted broadcast-rocksdb-incremental-p2; then
  keepjob broadcast-rocksdb-incremental-p2 \
    "$(bcast broadcast-rocksdb -p 2 -D state.backend.type=rocksdb -D state.backend.incremental=true)"
fi
# Unaligned checkpoints (issue 33; metadata format version 2): in-flight records stored by
# the exchange before the keyed count (InputChannelStateHandle) next to the counts, at p=1
# (hashmap) and p=2 (rocksdb, incremental). WordCount reads words.txt 8000 times (4.8 MB)
# unthrottled, so its keyed task is back-pressured and every barrier overtakes records;
# checkpoints every 50 ms, all retained, channels debloated to 20 ms of input (smaller
# snapshots); the snapshot is the newest one holding in-flight records (the final
# checkpoint is aligned). The other checkpoints are removed from a kept job directory, so
# that the chk-<n> a restore finds there is the snapshot (its shared SSTs stay).
# unaligned NAME CLASS INPUT [flags...]: prints the snapshot's chk directory: the newest
# checkpoint with at least $SUBTASKS (default 1) subtasks whose in-flight records' line in
# `inspect` matches $MATCH (default: any), channels debloated to $DEBLOAT (default 20ms).
unaligned() {
  local name=$1 cls=$2 input=$3
  shift 3
  "$JOBHOST" run -c "$cls" "$@" -D "state.checkpoints.dir=$work/$name" -D execution.checkpointing.interval=50ms \
    -D execution.checkpointing.unaligned=true -D state.checkpoints.num-retained=1000 \
    -D "taskmanager.network.memory.buffer-debloat.target=${DEBLOAT:-20ms}" \
    "$PLUGIN" --input "$input" >/dev/null 2>"$work/$name.err"
  local c chk=""
  for c in $(ls -d "$work/$name"/*/chk-* | sort -t- -k2 -n); do
    [ "$("$JOBHOST" inspect "$c" | grep "in-flight records" | grep -c -- "${MATCH:-}")" -ge "${SUBTASKS:-1}" ] && chk=$c
  done
  [ -n "$chk" ] || { echo "no checkpoint of $name holds in-flight records" >&2; exit 1; }
  for c in "$(dirname "$chk")"/chk-*; do
    [ "$c" = "$chk" ] || rm -rf "$c"
  done
  # The shared files of the checkpoints removed (those the snapshot does not reference).
  "$JOBHOST" gc "$(dirname "$chk")" >/dev/null
  echo "$chk"
}
words8000() {
  [ -f "$work/words-8000.txt" ] || for _ in $(seq 8000); do cat "$WORDS"; done >"$work/words-8000.txt"
  echo "$work/words-8000.txt"
}
if wanted unaligned-hashmap-p1; then
  cp -r "$(unaligned unaligned-hashmap-p1 WordCount "$(words8000)")" "$OUT/unaligned-hashmap-p1"
fi
if wanted unaligned-rocksdb-incremental-p2; then
  c=$(unaligned unaligned-rocksdb WordCountIncremental "$(words8000)" -p 2)
  keepjob unaligned-rocksdb-incremental-p2 "$(dirname "$c")"
fi
# Unaligned checkpoints of an event-time job (added 2026-12-06; the same format version 2,
# whose in-flight records carry since the receiving task's input watermark): WindowedWordCount
# over events.txt read 300 times, the r-th time with every timestamp 110 s * r later (so the
# input stays in order and each pass has windows of its own; tests/e2e/compat_test.cc
# writes the same file), unthrottled, a watermark every 5 ms (fewer open windows: a
# smaller snapshot); the snapshot holds window contents, timers and in-flight records
# stored with a watermark (of both subtasks at p=2).
events300() {
  [ -f "$work/events-300.txt" ] || awk -v R=300 '{ line[NR] = $0; ts[NR] = $1 }
    END { for (r = 0; r < R; r++) for (i = 1; i <= NR; i++)
            printf "%.0f%s\n", ts[i] + r * 110000, substr(line[i], length(ts[i]) + 1) }' \
    "$DATA/events.txt" >"$work/events-300.txt"
  echo "$work/events-300.txt"
}
if wanted unaligned-windowed-hashmap-p1; then
  cp -r "$(DEBLOAT=5ms MATCH="at input watermark" unaligned unaligned-windowed-hashmap-p1 WindowedWordCount \
    "$(events300)" -D pipeline.auto-watermark-interval=5ms)" "$OUT/unaligned-windowed-hashmap-p1"
fi
if wanted unaligned-windowed-rocksdb-incremental-p2; then
  c=$(DEBLOAT=5ms MATCH="at input watermark" SUBTASKS=2 unaligned unaligned-windowed-rocksdb WindowedWordCount \
    "$(events300)" -p 2 -D pipeline.auto-watermark-interval=5ms -D state.backend.type=rocksdb -D state.backend.incremental=true)
  keepjob unaligned-windowed-rocksdb-incremental-p2 "$(dirname "$c")"
fi
find "$OUT" -type f | sort | xargs ls -l
du -sh "$OUT"
