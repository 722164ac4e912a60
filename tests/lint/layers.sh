#!/usr/bin/env bash
# tests/lint/layers.sh — the include rules of docs/architecture.md, checked (issue 34):
#   - plugins/ include only the SDK (jobhost/...) and system headers;
#   - state/ and sdk/ include nothing of host/;
#   - inside host/, a file includes only files of its own layer or of a layer below it
#     (the layer table below is the one docs/architecture.md draws; keep them equal).
# A file of host/ that the table does not place is an error too: a new room gets a layer
# when it is added.
#
# usage: tests/lint/layers.sh [SOURCE_DIR]     (default: the repository)
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"

# Layer of a path under host/ (without the "host/" prefix), 0 if the table lacks it.
# Lower numbers are lower layers; see docs/architecture.md, "Layers of host/".
layer() {
  case "$1" in
    plugin/* | config/* | private_directory.* | exit_codes.h | wall_clock.h | run_options.h | job_id.* | log_format.*) echo 1 ;;
    runtime/*) echo 2 ;;
    checkpoint/*) echo 3 ;;
    control/*) echo 4 ;;
    metrics/* | signal_handling.* | startup_wait.h | job_work_directory.* | worker_spawn.*) echo 5 ;;
    ui/* | job_setup.*) echo 6 ;;
    cli/* | job_worker.*) echo 7 ;;
    job_supervisor.*) echo 8 ;;
    job_runner.*) echo 9 ;;
    main.cc) echo 10 ;;
    *) echo 0 ;;
  esac
}

fail=0
problem() {
  echo "$1"
  fail=1
}

# The quoted includes of a file: "FILE:LINE:PATH" lines.
includes() { grep -HnoE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"]+"' "$@" 2>/dev/null |
  sed -E 's/#[[:space:]]*include[[:space:]]+"([^"]+)"/\1/; s/:[[:space:]]*/:/2'; }

sources() { find "$@" -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cpp' -o -name '*.hpp' \) 2>/dev/null | sort; }

# 1. plugins/ see the SDK only.
while IFS=: read -r file line inc; do
  case "$inc" in jobhost/*) continue ;; esac
  # A header next to the including file (plugins/<name>/x.h) is the plugin's own.
  [ -f "$(dirname "$file")/$inc" ] && continue
  problem "$file:$line: includes \"$inc\": a plugin may include the SDK (jobhost/...) and its own headers only"
done < <(includes $(sources plugins))

# 2. state/ and sdk/ know nothing of host/.
while IFS=: read -r file line inc; do
  for dir in checkpoint cli config control metrics plugin runtime ui; do
    case "$inc" in "$dir"/* | host/*)
      [ -f "state/$inc" ] || [ -f "state/include/$inc" ] || [ -f "sdk/include/$inc" ] ||
        [ -f "$(dirname "$file")/$inc" ] ||
        problem "$file:$line: includes \"$inc\" of host/: state/ and sdk/ must not depend on the host"
      break ;;
    esac
  done
done < <(includes $(sources state sdk))

# 3. host/: no include runs up a layer.
checked=0
while IFS= read -r file; do
  rel=${file#host/}
  own=$(layer "$rel")
  if [ "$own" = 0 ]; then
    problem "$file: has no layer in tests/lint/layers.sh (and docs/architecture.md): give it one"
    continue
  fi
  while IFS=: read -r _ line inc; do
    [ -f "host/$inc" ] || continue  # the SDK, state/, generated or system headers
    theirs=$(layer "$inc")
    checked=$((checked + 1))
    if [ "$theirs" -gt "$own" ]; then
      problem "$file:$line: includes host/$inc (layer $theirs) from layer $own: an arrow running up;" \
        "move what it needs down, or turn it into an interface the lower layer owns"
    fi
  done < <(includes "$file")
done < <(sources host)

if [ "$fail" != 0 ]; then
  echo "FAIL: the includes above break the layers of docs/architecture.md" >&2
  exit 1
fi
echo "layers hold: $checked includes inside host/ checked, plugins/ see only the SDK, state/ and sdk/ nothing of host/"
