#!/usr/bin/env bash
# A plugin compiled with a standard older than C++20 stops at the SDK's first header with
# one error saying so (issue 14), not deep inside serializer.h ('std::endian' has not been
# declared). Checks every public header on its own and jobhost.h, with the compiler CMake
# uses. usage: cxx_standard_test.sh CXX SDK_INCLUDE_DIR WORK_DIR
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $# -eq 3 ]] || fail "usage: cxx_standard_test.sh CXX SDK_INCLUDE_DIR WORK_DIR"
cxx=$1 inc=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
checked=0
for h in "$inc"/jobhost/*.h; do
  name=jobhost/${h##*/}
  printf '#include <%s>\nint main() { return 0; }\n' "$name" > "$work/main.cpp"
  for std in c++17 c++14; do
    if "$cxx" -std=$std -fsyntax-only -I "$inc" "$work/main.cpp" > "$work/out.txt" 2>&1; then
      fail "$name compiled with -std=$std; it must stop with the C++20 message"
    fi
    errors=$(grep -cE ': (fatal )?error:' "$work/out.txt" || true)
    grep -q 'the jobhost SDK needs C++20: compile with -std=c++20' "$work/out.txt" ||
      { cat "$work/out.txt" >&2; fail "$name with -std=$std: no 'needs C++20' message"; }
    # the #error line and the fatal include that stops the compiler, nothing else
    [[ $errors -le 2 ]] || { cat "$work/out.txt" >&2; fail "$name with -std=$std: $errors error lines, want at most 2"; }
    checked=$((checked + 1))
  done
  # and the header is fine with C++20 (the guard does not misfire)
  "$cxx" -std=c++20 -fsyntax-only -I "$inc" "$work/main.cpp" > "$work/out.txt" 2>&1 ||
    { cat "$work/out.txt" >&2; fail "$name does not compile on its own with -std=c++20"; }
done
[[ $checked -ge 20 ]] || fail "checked only $checked header/standard pairs"
echo "ok: $checked header/standard pairs stop with the C++20 message"
