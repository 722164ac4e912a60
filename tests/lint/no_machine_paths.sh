#!/usr/bin/env bash
# tests/lint/no_machine_paths.sh — no comment or document names a directory of one
# machine (issue 34): a path such as /work/<repo>/... or /home/<user>/... means nothing on
# another checkout. The shared references are ../shared/... from the repository's
# directory, as developers and CI have them. Raw benchmark outputs
# (tests/bench/results/) are records of one run and keep the paths they printed.
#
# usage: tests/lint/no_machine_paths.sh [SOURCE_DIR]     (default: the repository)
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  files() { git ls-files -z; }
else
  files() { find . -path ./.git -prune -o -path './build*' -prune -o -type f -print0; }
fi
# A path that starts at the root with /work/ or /home/<name>/ (not e.g.
# /tmp/jobhost-<uid>/work, where "work" is a component further down).
pattern='(^|[][[:space:]`'"'"'"(=:,])/(work|home/[a-z_][a-z0-9_-]*)/'
hits=$(files | grep -zv '^\(\./\)\?tests/\(bench/results\|lint\)/' | xargs -0 grep -IHnE "$pattern" 2>/dev/null || true)
if [ -n "$hits" ]; then
  echo "$hits"
  echo "FAIL: the lines above name a directory of one machine; use a path relative to the repository" \
    "(../shared/... for the shared references) or a placeholder such as <dir>" >&2
  exit 1
fi
echo "no machine paths in $(files | tr -cd '\0' | wc -c) files"
