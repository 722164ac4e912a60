#!/usr/bin/env bash
# Builds one CPack package from the build tree (into WORK_DIR, not the build tree) and
# checks that it lists the files the package must ship; for the DEB also its control
# fields. Never installs the package.
#
# usage: cpack_test.sh TGZ|DEB BUILD_DIR WORK_DIR CPACK SOURCE_DIR
# Exits 77 (ctest: skipped) for DEB when dpkg-deb is not available.
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

[[ $# -eq 5 ]] || fail "usage: cpack_test.sh TGZ|DEB BUILD_DIR WORK_DIR CPACK SOURCE_DIR"
generator=$1 build_dir=$2 work=$3 cpack=$4 source_dir=$5

if [[ $generator == DEB ]] && ! command -v dpkg-deb >/dev/null; then
  echo "dpkg-deb not found: skipping the DEB test"
  exit 77
fi

rm -rf "$work"
mkdir -p "$work"
if ! "$cpack" --config "$build_dir/CPackConfig.cmake" -G "$generator" -B "$work" >"$work/cpack.log" 2>&1; then
  cat "$work/cpack.log" >&2
  fail "cpack -G $generator failed"
fi

# The files every package ships, relative to the install prefix.
expected=(
  bin/jobhost
  lib/jobhost/plugins/libwordcount_jobs.so
  lib/jobhost/libjobhost_s3_http.so
  lib/cmake/jobhost/jobhostConfig.cmake
  lib/cmake/jobhost/jobhostConfigVersion.cmake
  lib/cmake/jobhost/jobhostTargets.cmake
  lib/cmake/jobhost/jobhostAddPlugin.cmake
  share/bash-completion/completions/jobhost
  share/doc/jobhost/README.md
  share/doc/jobhost/SDK.md
)
for h in "$source_dir"/sdk/include/jobhost/*.h; do expected+=("include/jobhost/${h##*/}"); done

# Prints the package's regular files, one path a line, as ./<path>.
case $generator in
  TGZ)
    pkg=$(compgen -G "$work/*.tar.gz" | head -n1) || true
    [[ -n $pkg ]] || fail "cpack -G TGZ produced no .tar.gz in $work"
    # The archive holds one top directory (jobhost-<version>-<system>/); strip it.
    tar -tzvf "$pkg" | awk '$1 ~ /^-/ {print $NF}' | sed -E 's|^[^/]+/|./|' >"$work/contents.txt"
    prefix=.
    etc=./etc/jobhost/config.yaml
    ;;
  DEB)
    pkg=$(compgen -G "$work/*.deb" | head -n1) || true
    [[ -n $pkg ]] || fail "cpack -G DEB produced no .deb in $work"
    dpkg-deb -c "$pkg" | awk '$1 ~ /^-/ {print $NF}' >"$work/contents.txt"
    prefix=./usr
    # A /usr install keeps its configuration in /etc (Debian policy).
    etc=./etc/jobhost/config.yaml
    ;;
  *) fail "unknown generator $generator" ;;
esac
echo "package: $pkg"

missing=()
for f in "${expected[@]}"; do grep -qxF "$prefix/$f" "$work/contents.txt" || missing+=("$prefix/$f"); done
grep -qxF "$etc" "$work/contents.txt" || missing+=("$etc")
if [[ ${#missing[@]} -gt 0 ]]; then
  printf '  %s\n' "${missing[@]}" >&2
  fail "$pkg lacks the files above (contents: $work/contents.txt)"
fi
# Nothing of the build or test tree may leak into the package.
if grep -E 'jhtest|sdk_examples|gtest|/tests/' "$work/contents.txt" >&2; then
  fail "$pkg ships test files (above)"
fi

# The plugin is not stripped: its symbol table is still there (and .jhmeta, which the
# host reads without loading the plugin).
mkdir -p "$work/extract"
case $generator in
  TGZ) tar -xzf "$pkg" -C "$work/extract" --wildcards '*/lib/jobhost/plugins/libwordcount_jobs.so' ;;
  DEB) dpkg-deb -x "$pkg" "$work/extract" ;;
esac
plugin=$(find "$work/extract" -name libwordcount_jobs.so | head -n1)
[[ -n $plugin ]] || fail "cannot extract libwordcount_jobs.so from $pkg"
sections=$(readelf -S "$plugin")
grep -q '\.jhmeta' <<<"$sections" || fail "the packaged plugin has no .jhmeta section"
grep -q '\.symtab' <<<"$sections" || fail "the packaged plugin was stripped (no .symtab)"

if [[ $generator == DEB ]]; then
  fields=$(dpkg-deb -f "$pkg" Package Version Architecture Depends Recommends)
  echo "$fields"
  depends=$(dpkg-deb -f "$pkg" Depends)
  # Debian 12 package names of the libraries jobhost links. spdlog's shlibs name the
  # virtual package libspdlog1.10-fmt9 (provided by libspdlog1.10): spdlog's ABI
  # includes the fmt it was built with.
  for dep in librocksdb7.8 libcapnp-0.9.2 'libspdlog1.10(-fmt9)?' libfmt9 libyaml-cpp0.7 libboost-filesystem1.74.0 libcurl4 libexpat1; do
    grep -qE "(^|[ ,|])${dep//./\\.}([ ,(|]|$)" <<<"$depends" || fail "Depends lacks $dep: $depends"
  done
  grep -qw libboost-dev <<<"$(dpkg-deb -f "$pkg" Recommends)" || fail "Recommends lacks libboost-dev"
  conffiles=$(dpkg-deb -I "$pkg" conffiles 2>/dev/null) || fail "the DEB has no conffiles"
  grep -qxF /etc/jobhost/config.yaml <<<"$conffiles" || fail "conffiles lacks /etc/jobhost/config.yaml: $conffiles"
fi

echo "PASS: $generator package lists $(wc -l <"$work/contents.txt") files"
