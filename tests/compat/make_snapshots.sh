#!/usr/bin/env bash
# tests/compat/make_snapshots.sh — produces the compatibility snapshots of the CURRENT
# metadata format version into a NEW directory (see tests/compat/README.md).
#
#   tests/compat/make_snapshots.sh build tests/compat/v2      # only for a new format version
#
# It refuses to write into an existing directory: committed snapshots are never
# regenerated. Each snapshot is a real run of the example plugin over the bundled
# plugins/wordcount/data/words.txt, throttled (--rate 10: 14 lines in 1.4 s) so that checkpoints
# (every 500 ms) complete while the input is still being read.
set -euo pipefail
BUILD=${1:?usage: make_snapshots.sh BUILD_DIR OUT_DIR}
OUT=${2:?usage: make_snapshots.sh BUILD_DIR OUT_DIR}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
JOBHOST=$BUILD/host/jobhost
PLUGIN=$BUILD/plugins/libwordcount_jobs.so
WORDS=$ROOT/plugins/wordcount/data/words.txt
if [ -e "$OUT" ]; then
  echo "$OUT exists: committed snapshots are never regenerated; add a new version directory" >&2
  exit 1
fi
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
j=$(run hashmap WordCount)
cp -r "$(ls -d "$j"/chk-* | tail -1)" "$OUT/hashmap-keygroups"
# 2. rocksdb full snapshots: KeyGroupsStateHandle written by the rocksdb backend.
j=$(run rocksdb-full WordCountIncremental -D state.backend.incremental=false)
cp -r "$(ls -d "$j"/chk-* | tail -1)" "$OUT/rocksdb-full"
# 3. rocksdb incremental: IncrementalRemoteKeyedStateHandle; the whole job directory, so
#    shared/ (SSTs of earlier checkpoints) comes along. Paths in _metadata are relative
#    to the chk directory ("../shared/..."), so the copy restores where it lies.
j=$(run rocksdb-incremental WordCountIncremental)
mkdir "$OUT/rocksdb-incremental"
cp -r "$j" "$OUT/rocksdb-incremental/"
rmdir "$OUT/rocksdb-incremental/$(basename "$j")/taskowned" 2>/dev/null || true
# 4. a canonical savepoint converted from the incremental checkpoint.
"$JOBHOST" convert "$(ls -d "$j"/chk-* | tail -1)" "$OUT/savepoint-canonical" >/dev/null 2>&1
find "$OUT" -type f | sort | xargs ls -l
du -sh "$OUT"
