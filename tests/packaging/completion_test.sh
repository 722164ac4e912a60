#!/usr/bin/env bash
# Drives the bash completion function the way bash does (COMP_WORDS/COMP_CWORD) and checks
# the candidates: subcommands, options per subcommand, *.so for plugin positions,
# directories for -s, -D keys and values, classes from `jobhost info`.
#
# usage: completion_test.sh COMPLETION_SCRIPT JOBHOST PLUGIN WORK_DIR
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[[ $# -eq 4 ]] || fail "usage: completion_test.sh COMPLETION_SCRIPT JOBHOST PLUGIN WORK_DIR"
script=$1 jobhost=$2 plugin=$3 work=$4
rm -rf "$work"
mkdir -p "$work/snapshots/chk-1" "$work/plugins"
touch "$work/plugins/my_jobs.so" "$work/plugins/notes.txt" "$work/app.yaml"
cd "$work"

# shellcheck source=/dev/null
source "$script"

# complete CWORD WORD...: the candidates for word CWORD of the command line, sorted, one
# a line. Runs as bash runs completion functions: without errexit/nounset.
complete_at() {
  local cword=$1
  shift
  (
    set +euo pipefail
    COMP_WORDS=("$@")
    COMP_CWORD=$cword
    COMPREPLY=()
    _jobhost
    printf '%s\n' "${COMPREPLY[@]}" | sort
  )
}
# complete WORD...: completes the last word.
complete_last() { complete_at $(($# - 1)) "$@"; }

# oneline LINES: the lines joined by spaces, for messages.
oneline() { paste -sd' ' <<<"$1"; }
# check DESCRIPTION EXPECTED ACTUAL: EXPECTED is a space-separated candidate list.
check() {
  local want
  want=$(tr ' ' '\n' <<<"$2" | grep -v '^$' | sort)
  [[ $3 == "$want" ]] || fail "$1: expected [$(oneline "$want")], got [$(oneline "$3")]"
}
# has DESCRIPTION WORD ACTUAL / lacks ...: one candidate is / is not offered.
has() { grep -qxF -- "$2" <<<"$3" || fail "$1: '$2' not offered (got: $(oneline "$3"))"; }
lacks() { ! grep -qxF -- "$2" <<<"$3" || fail "$1: '$2' offered but should not be"; }

check "subcommands" "info run check inspect checkpoints convert gc state list savepoint cancel stop ui" \
  "$(complete_last jobhost "")"
check "subcommand prefix" "check checkpoints" "$(complete_last jobhost ch)"
check "global options" "--help --verbose --version" "$(complete_last jobhost --)"

out=$(complete_last jobhost run --)
for o in --class --parallelism --config --from-snapshot --allow-non-restored-state --dry-run --help; do
  has "run options" "$o" "$out"
done
out=$(complete_last jobhost check --)
has "check options" --from-snapshot "$out"
lacks "check options" --dry-run "$out"
has "run options" --detached "$(complete_last jobhost run --)"
check "inspect options" "--help --json" "$(complete_last jobhost inspect --)"
check "info options" "--help --config" "$(complete_last jobhost info --)"
check "gc options" "--help --dry-run --config" "$(complete_last jobhost gc --)"
out=$(complete_last jobhost ui --)
for o in --port --address --allowed-host --no-auth --print-url --read-only; do
  has "ui options" "$o" "$out"
done
check "savepoint --format" "canonical native" "$(complete_last jobhost savepoint 3f2a --format "")"
check "stop -p takes directories" "snapshots/chk-1" "$(complete_last jobhost stop -p snapshots/)"
check "--restore-mode values" "claim no-claim" "$(complete_last jobhost run --restore-mode "")"
check "state actions" "ls dump diff" "$(complete_last jobhost state "")"
check "state dump --format" "csv json table" "$(complete_last jobhost state dump snapshots/chk-1 --format "")"
check "state diff takes directories" "snapshots/chk-1" "$(complete_last jobhost state diff snapshots/)"
has "state dump options" --limit "$(complete_last jobhost state dump --)"
has "state dump --plugin takes plugins" plugins/my_jobs.so "$(complete_last jobhost state dump x --plugin plugins/)"

check "plugin position (run)" "plugins/my_jobs.so" "$(complete_last jobhost run -p 2 plugins/)"
check "plugin position (info)" "plugins/my_jobs.so" "$(complete_last jobhost info plugins/m)"
check "-s takes directories" "snapshots/chk-1" "$(complete_last jobhost run -s snapshots/)"
check "inspect takes directories" "snapshots/chk-1" "$(complete_last jobhost inspect snapshots/)"
check "--config takes yaml" "app.yaml" "$(complete_last jobhost run --config a)"
check "after the plugin: job arguments (any file)" "plugins/my_jobs.so plugins/notes.txt" \
  "$(complete_last jobhost run -c X plugins/my_jobs.so --input plugins/)"

backend_keys="state.backend.type= state.backend.incremental= state.backend.rocksdb.writebuffer.size=
  state.backend.rocksdb.writebuffer.count= state.backend.rocksdb.block.cache-size=
  state.backend.rocksdb.entry-cache.size= state.backend.rocksdb.compaction.style=
  state.backend.rocksdb.checkpoint.transfer.thread.num="
check "-D keys" "$backend_keys" "$(complete_last jobhost run -D state.backend.)"
check "-D keys (info)" "$backend_keys" "$(complete_last jobhost info -D state.backend.)"
check "-D rocksdb keys" "state.backend.rocksdb.writebuffer.size= state.backend.rocksdb.writebuffer.count=" \
  "$(complete_last jobhost run -D state.backend.rocksdb.w)"
check "-D compaction styles" "LEVEL UNIVERSAL FIFO" "$(complete_last jobhost run -D state.backend.rocksdb.compaction.style =)"
check "-D values (bash splits at =)" "rocksdb" \
  "$(complete_last jobhost run -D state.backend.type = r)"
check "-D values right after =" "hashmap rocksdb" "$(complete_last jobhost run -D state.backend.type =)"
check "a -D pair is skipped" "plugins/my_jobs.so" \
  "$(complete_last jobhost run -D state.backend.type = rocksdb plugins/)"

# -c reads the classes of the plugin on the line (its .jhmeta section, or `jobhost info`).
out=$(complete_at 3 "$jobhost" run -c "" "$plugin")
has "-c classes" WordCount "$out"
has "-c classes" WordCountIncremental "$out"
check "-c class prefix" "WordCount WordCountIncremental WordCountToPostgres WordThresholds" "$(complete_at 3 "$jobhost" run -c Word "$plugin")"

if command -v readelf >/dev/null; then
  check "-c classes from .jhmeta, no plugin code run" "WordCount WordCountIncremental WordCountToPostgres WordThresholds" \
    "$(complete_at 3 /nonexistent/jobhost run -c Word "$plugin")"
fi
# Without readelf, the classes come from `jobhost info`: hide readelf with a PATH that
# has only the tools the fallback needs.
mkdir -p "$work/bin"
for tool in awk sed sort; do ln -sf "$(command -v $tool)" "$work/bin/$tool"; done
check "-c classes without readelf" "WordCount WordCountIncremental WordCountToPostgres WordThresholds" \
  "$(PATH=$work/bin complete_at 3 "$jobhost" run -c Word "$plugin")"

echo "PASS: bash completion"
