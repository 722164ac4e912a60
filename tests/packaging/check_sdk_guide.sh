#!/usr/bin/env bash
# Every code example of the SDK guide is compiled by the test suite: each ```cpp or
# ```cmake block of sdk/README.md must start with a marker line naming a file under
# tests/packaging/, and be that file byte for byte:
#
#   ```cpp                                  ```cmake
#   // example: sdk_examples/serializer.cpp  # example: plugin_project/CMakeLists.txt
#
# The .cpp files are compiled into the jobhost_sdk_examples plugin; plugin_project/ is
# built by packaging_install. Every sdk_examples/*.cpp must appear in the guide.
#
# usage: check_sdk_guide.sh SDK_README TESTS_PACKAGING_DIR
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[[ $# -eq 2 ]] || fail "usage: check_sdk_guide.sh SDK_README TESTS_PACKAGING_DIR"
readme=$1 dir=$2
[[ -f $readme ]] || fail "no $readme"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Writes block n of a checked language to $tmp/<n>.block and its marker (or "-" for
# none) and starting line to $tmp/index, one "n line marker" a block.
awk -v tmp="$tmp" '
  !inblock && /^```/ {
    inblock = 1; lang = substr($0, 4); first = 1; start = NR
    checked = (lang == "cpp" || lang == "c++" || lang == "cmake")
    if (checked) { n++; out = tmp "/" n ".block"; printf "" > out }
    next
  }
  inblock && /^```[ \t]*$/ {
    inblock = 0
    if (checked && first) print n, start, "-" >> (tmp "/index")  # an empty block
    if (checked) close(out)
    next
  }
  inblock && checked {
    if (first) {
      marker = "-"
      if (match($0, /^(\/\/|#) example: [^ ]+$/)) { marker = $0; sub(/^(\/\/|#) example: /, "", marker) }
      print n, start, marker >> (tmp "/index")
      first = 0
    }
    print >> out
  }
  END { if (inblock) { print "unterminated code block starting at line " start > "/dev/stderr"; exit 1 } }
' "$readme" || fail "cannot parse $readme"

[[ -s $tmp/index ]] || fail "$readme has no \`\`\`cpp or \`\`\`cmake blocks"
errors=0 checked=0
declare -A seen=()
while read -r n line marker; do
  if [[ $marker == - ]]; then
    echo "$readme:$line: code block without an '// example: <file>' (or '# example: <file>') first line" >&2
    errors=$((errors + 1))
    continue
  fi
  file=$dir/$marker
  if [[ ! -f $file ]]; then
    echo "$readme:$line: the block names $marker, but $file does not exist" >&2
    errors=$((errors + 1))
    continue
  fi
  if ! cmp -s "$tmp/$n.block" "$file"; then
    echo "$readme:$line: the block differs from $file:" >&2
    diff -u "$file" "$tmp/$n.block" | sed 's/^/    /' >&2 || true
    errors=$((errors + 1))
    continue
  fi
  seen[$marker]=1
  checked=$((checked + 1))
done <"$tmp/index"

for f in "$dir"/sdk_examples/*.cpp; do
  rel=sdk_examples/${f##*/}
  [[ -n ${seen[$rel]:-} ]] || {
    echo "$f is compiled as an SDK example but not shown in $readme" >&2
    errors=$((errors + 1))
  }
done

((errors == 0)) || fail "$errors problem(s) with the code blocks of $readme (fix the guide or the file so they match)"
echo "PASS: $checked code blocks of $readme match their files"
