#!/usr/bin/env bash
# The shipped configuration file (packaging/config.yaml) and the bash completion of -D
# must know exactly the keys of the README's "Configuration" table, so that a key added
# to jobhost and documented there is not forgotten in the package.
#
# usage: check_config_keys.sh README CONFIG_YAML BASH_COMPLETION
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[[ $# -eq 3 ]] || fail "usage: check_config_keys.sh README CONFIG_YAML BASH_COMPLETION"
readme=$1 config=$2 completion=$3

# Table rows look like "| `a.b.c` / `.d` / `.e` | default | meaning |": the first key is
# full, the others replace its last component.
readme_keys=$(awk '
  /^## Configuration/ { inside = 1; next }
  /^## / { inside = 0 }
  inside && /^\| `/ {
    split($0, cells, "|")
    n = split(cells[2], parts, "/")
    first = ""
    for (i = 1; i <= n; i++) {
      key = parts[i]
      gsub(/[ `]/, "", key)
      if (key == "") continue
      if (first == "") { first = key; print key; continue }
      base = first; sub(/\.[^.]*$/, "", base)
      print base key
    }
  }' "$readme" | sort -u)
[[ -n $readme_keys ]] || fail "found no configuration keys in the \"## Configuration\" table of $readme"

config_keys=$(sed -n -E 's/^# ([a-z][a-z0-9-]*(\.[a-z0-9-]+)+):( .*)?$/\1/p' "$config" | sort -u)
completion_keys=$(sed -n '/^_jobhost_config_keys="/,/"$/p' "$completion" | tr -d '"' |
  sed 's/^_jobhost_config_keys=//' | tr ' ' '\n' | grep -v '^$' | sort -u)

status=0
compare() {
  local what=$1 keys=$2
  if [[ $keys != "$readme_keys" ]]; then
    echo "$what and the README's Configuration table differ (< README only, > $what only):" >&2
    diff <(echo "$readme_keys") <(echo "$keys") | grep '^[<>]' | sed 's/^/  /' >&2 || true
    status=1
  fi
}
compare "$config" "$config_keys"
compare "$completion" "$completion_keys"
((status == 0)) || fail "configuration keys out of sync"
echo "PASS: $(wc -l <<<"$readme_keys") keys in the README, $config and $completion"
