#!/usr/bin/env bash
# The package as a plugin author meets it: install the build tree into a temporary prefix,
# build tests/packaging/plugin_project against that prefix only (find_package(jobhost) +
# jobhost_add_plugin), and run its two classes with the *installed* jobhost, each through
# a checkpoint and a restore that continues the counts. Also checks the installed layout,
# the default configuration file and what the plugin exports.
#
# Then builds the example plugin's own sources (plugins/wordcount) out of tree the same way
# (examples_project/: find_package(jobhost COMPONENTS postgres), jobhost::postgres).
#
# usage: install_test.sh --build-dir DIR --project DIR --examples DIR --work DIR --cmake CMAKE
#                        --generator GEN --make-program PROG --cxx COMPILER
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
step() { echo "== $*"; }
# Runs a command with its output in a log file; on failure shows the log and fails.
logged() {
  local log=$1
  shift
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    fail "command failed (log: $log): $*"
  fi
}

build_dir="" project="" examples="" work="" cmake="" generator="" make_program="" cxx=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2 ;;
    --project) project=$2 ;;
    --examples) examples=$2 ;;
    --work) work=$2 ;;
    --cmake) cmake=$2 ;;
    --generator) generator=$2 ;;
    --make-program) make_program=$2 ;;
    --cxx) cxx=$2 ;;
    *) fail "unknown argument $1" ;;
  esac
  shift 2
done
for v in build_dir project examples work cmake generator cxx; do
  [[ -n ${!v} ]] || fail "missing --${v//_/-}"
done

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
# Nothing may come from the user's environment: checkpoints, configuration, packages.
export JOBHOST_HOME=$work/home
unset JOBHOST_CONF_DIR JOBHOST_LOG_LEVEL CMAKE_PREFIX_PATH

step "install $build_dir into $prefix"
logged "$work/install.log" "$cmake" --install "$build_dir" --prefix "$prefix"
for f in bin/jobhost \
  include/jobhost/jobhost.h include/jobhost/job.h include/jobhost/stream.h include/jobhost/state.h \
  include/jobhost/serializer.h include/jobhost/version.h \
  lib/jobhost/plugins/libwordcount_jobs.so lib/jobhost/libjobhost_s3_http.so \
  lib/cmake/jobhost/jobhostConfig.cmake lib/cmake/jobhost/jobhostConfigVersion.cmake \
  lib/cmake/jobhost/jobhostTargets.cmake lib/cmake/jobhost/jobhostAddPlugin.cmake \
  etc/jobhost/config.yaml share/bash-completion/completions/jobhost; do
  [[ -f $prefix/$f ]] || fail "the install tree lacks $f (see $work/install.log)"
done
jobhost=$prefix/bin/jobhost
[[ -x $jobhost ]] || fail "$jobhost is not executable"
# An installed binary must not find its libraries through the build tree.
if readelf -d "$jobhost" | grep -E 'R(UN)?PATH' | grep -qF "$build_dir"; then
  fail "installed jobhost has an RPATH into the build tree: $(readelf -d "$jobhost" | grep -E 'R(UN)?PATH')"
fi
version_out=$("$jobhost" --version) || fail "jobhost --version failed"
echo "$version_out"

step "configure and build the out-of-tree plugin project against $prefix"
generator_args=(-G "$generator")
[[ -n $make_program ]] && generator_args+=(-DCMAKE_MAKE_PROGRAM="$make_program")
# The same compiler as the host: a plugin built by another one is refused (ABI tag).
logged "$work/configure.log" "$cmake" -S "$project" -B "$work/plugin-build" "${generator_args[@]}" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS=-g1 \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
if grep -q "CMake Warning" "$work/configure.log"; then
  cat "$work/configure.log" >&2
  fail "configuring the plugin project warned (see above)"
fi
found_dir=$(sed -n 's/^jobhost_DIR:PATH=//p' "$work/plugin-build/CMakeCache.txt")
[[ $found_dir == "$prefix/lib/cmake/jobhost" ]] ||
  fail "find_package(jobhost) found '$found_dir', not the package installed in $prefix"
logged "$work/build.log" "$cmake" --build "$work/plugin-build"
plugin=$work/plugin-build/libmy_jobs.so
[[ -f $plugin ]] || fail "the plugin project built no $plugin"

step "debug sections compressed (readelf -S)"
# jobhost_add_plugin links with --compress-debug-sections=zlib: `jobhost run` copies and
# hashes the whole file at every start, and debug information is most of a -g build.
# readelf marks a compressed section with flag C.
debug_info=$(readelf -S -W "$plugin" | grep -F ' .debug_info ') ||
  fail "the plugin $plugin, built with -g1, has no .debug_info section"
flags=$(awk '{for (i = 1; i <= NF; ++i) if ($i == "PROGBITS") {print $(i + 5); exit}}' <<<"${debug_info#*]}")
[[ $flags == *C* ]] || fail "the plugin's .debug_info is not compressed (flags '$flags'): $debug_info"

step "jobhost info"
info_out=$("$jobhost" info "$plugin") || fail "jobhost info $plugin failed"
echo "$info_out"
for cls in HeapWordCount RocksWordCount; do
  grep -qw "$cls" <<<"$info_out" || fail "jobhost info does not list $cls"
done
# The plugin was built against the installed SDK with the host's compiler: same ABI tag.
abi=$(grep -o 'ABI [^ )]*' <<<"$version_out" | head -n1 | cut -d' ' -f2)
[[ -n $abi ]] || fail "jobhost --version names no ABI tag: $version_out"
grep -qF "$abi" <<<"$info_out" || fail "the plugin's ABI differs from the host's ($abi): $info_out"

step "exported symbols (nm -D --defined-only)"
# The plugin is built with hidden visibility, so it must export its job table — the
# Boost.DLL aliases jhjob_<Class> — and nothing of its own. What else may appear is
# vague-linkage symbols ('V' weak object, 'W' weak function, 'u' unique global) of
# entities whose headers force default visibility, emitted in every object that uses them:
#   std::, __gnu_cxx::  libstdc++ declares its namespaces visibility("default"), so template
#                       instantiations and inline statics stay visible (e.g. std::_Rb_tree,
#                       __to_chars_10_impl::__digits);
#   boost::             Boost.System's error categories, declared BOOST_SYMBOL_VISIBLE,
#                       pulled in by boost/dll/alias.hpp;
#   jobhost::           typeinfo/vtables of the SDK's JOBHOST_API classes (Job, the
#                       exception types), visible on purpose so the host can catch them.
# Any strong definition (T, D, B, R, ...) other than the aliases, or any vague-linkage
# symbol of another namespace (the plugin's own code), fails the test.
# check_exports PLUGIN [ALIAS...]: applies the rules above; with ALIAS arguments the
# aliases must be exactly those.
check_exports() {
  local so=$1 nm_out=$work/nm-${1##*/}.txt
  shift
  nm -D --defined-only "$so" >"$nm_out" || fail "nm -D $so failed"
  local -a aliases=() bad=()
  local _addr type name pretty entity
  while read -r _addr type name; do
    if [[ $name == jhjob_* ]]; then
      aliases+=("$name")
      continue
    fi
    pretty=$(c++filt "$name")
    case $type in
      V | W | u)
        entity=${pretty#typeinfo name for }
        entity=${entity#typeinfo for }
        entity=${entity#vtable for }
        entity=${entity#guard variable for }
        # Demangled template functions start with their return type: "void std::...".
        entity=$(sed -E 's/^((void|bool|char|int|long|unsigned|short) )+//' <<<"$entity")
        case $entity in
          std::* | __gnu_cxx::* | boost::*) continue ;;
          jobhost::*)
            [[ $pretty == typeinfo* || $pretty == vtable* ]] && continue ;;
        esac
        ;;
    esac
    bad+=("$type $pretty")
  done <"$nm_out"
  if [[ ${#bad[@]} -gt 0 ]]; then
    printf '  %s\n' "${bad[@]}" >&2
    fail "$so exports symbols beyond its job table (listed above; full list: $nm_out)"
  fi
  [[ ${#aliases[@]} -gt 0 ]] || fail "$so exports no job aliases (jhjob_<Class>)"
  local found want
  found=$(printf '%s\n' "${aliases[@]}" | sort | tr '\n' ' ')
  if [[ $# -gt 0 ]]; then
    want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
    [[ $found == "$want" ]] || fail "$so: expected the aliases $want, found $found"
  fi
  echo "${so##*/} exports: ${found}plus $(($(wc -l <"$nm_out") - ${#aliases[@]})) std/boost/SDK vague-linkage symbols"
}
check_exports "$plugin" jhjob_HeapWordCount jhjob_RocksWordCount
check_exports "$prefix/lib/jobhost/plugins/libwordcount_jobs.so"

step "the example plugin's sources, out of tree against $prefix"
# Unoptimised (no build type): this checks what the build needs, not the code it makes.
logged "$work/examples-configure.log" "$cmake" -S "$(dirname "$project")/examples_project" -B "$work/examples-build" \
  "${generator_args[@]}" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" -DEXAMPLES_DIR="$examples" \
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF
logged "$work/examples-build.log" "$cmake" --build "$work/examples-build"
examples_info=$("$jobhost" info "$work/examples-build/libwordcount_jobs.so") || fail "jobhost info of the examples failed"
for cls in WordCount NexmarkQ5 WordCountToPostgres; do
  grep -qw "$cls" <<<"$examples_info" || fail "the out-of-tree example plugin lacks $cls: $examples_info"
done

step "the installed default configuration loads"
# As shipped (everything commented out), and with every setting uncommented: each
# documented key must parse with the value shown.
echo "alpha beta" >"$work/tiny.txt"
logged "$work/config-default.log" "$jobhost" run --config "$prefix/etc/jobhost/config.yaml" \
  -c HeapWordCount "$plugin" --input "$work/tiny.txt" --output-file "$work/config-default.out"
sed -E 's/^# ([a-z][a-z0-9-]*(\.[a-z0-9-]+)+: )/\1/' "$prefix/etc/jobhost/config.yaml" >"$work/config-all.yaml"
[[ $(grep -cE '^[a-z]' "$work/config-all.yaml") -ge 20 ]] || fail "uncommenting the settings of config.yaml found too few"

logged "$work/config-all.log" "$jobhost" run --config "$work/config-all.yaml" \
  -D state.checkpoints.dir="$work/ckpt-config" -D state.local.dir="$work/local" \
  -c HeapWordCount "$plugin" --input "$work/tiny.txt" --output-file "$work/config-all.out"
# (A value the class itself sets, such as HeapWordCount's checkpoint interval, is named
# as overridden: that is about the class, not the file.)
if grep -i "warn" "$work/config-default.log" "$work/config-all.log" | grep -qv "has no effect: the job's class sets"; then
  cat "$work/config-default.log" "$work/config-all.log" >&2
  fail "jobhost warned about the shipped configuration file"
fi

# Input: 60 lines read at 120 lines/s (about 0.5 s) while checkpoints run every 100 ms,
# so the last checkpoint of the first run lies inside the file. Then lines are appended
# (with a new word) and the job is restored from that checkpoint over the grown file.
base=$work/base.txt
for ((i = 1; i <= 60; i++)); do
  if ((i % 3 == 0)); then echo "alpha beta gamma delta"; else echo "alpha beta gamma"; fi
done >"$base"
extra=$'alpha beta gamma delta epsilon\nalpha epsilon\nbeta delta epsilon'

# Prints "word count" for every word of file $1, sorted.
word_counts() { tr -s ' ' '\n' <"$1" | grep -v '^$' | sort | uniq -c | awk '{print $2, $1}'; }
# Prints "word count" for the last (word,count) record of each word in output file $1.
last_counts() { sed -n 's/^(\(.*\),\([0-9]*\))$/\1 \2/p' "$1" | awk '{last[$1] = $2} END {for (w in last) print w, last[w]}' | sort; }

for cls in HeapWordCount RocksWordCount; do
  step "$cls: first run with checkpoints"
  input=$work/$cls-input.txt
  cp "$base" "$input"
  ckpt=$work/ckpt-$cls
  logged "$work/$cls-run1.log" "$jobhost" run -c "$cls" \
    -D execution.checkpointing.interval=100ms -D state.checkpoints.dir="$ckpt" \
    "$plugin" --input "$input" --rate 120 --output-file "$work/$cls-out1.txt"
  [[ "$(last_counts "$work/$cls-out1.txt")" == "$(word_counts "$input")" ]] ||
    fail "$cls: the first run's final counts differ from the input's word counts (see $work/$cls-out1.txt)"
  job_dirs=("$ckpt"/*)
  [[ ${#job_dirs[@]} -eq 1 && -d ${job_dirs[0]} ]] || fail "$cls: expected one job directory in $ckpt"
  job_dir=${job_dirs[0]}
  compgen -G "$job_dir/chk-*/_metadata" >/dev/null ||
    fail "$cls: the first run completed no checkpoint in $job_dir (see $work/$cls-run1.log)"
  history=$("$jobhost" checkpoints "$job_dir") || fail "$cls: jobhost checkpoints $job_dir failed"
  if [[ $cls == RocksWordCount ]]; then
    grep -q incremental <<<"$history" || fail "$cls: the checkpoints are not incremental: $history"
  fi

  step "$cls: restore (-s) over the grown input"
  printf '%s\n' "$extra" >>"$input"
  logged "$work/$cls-check.log" "$jobhost" check -s "$job_dir" -c "$cls" "$plugin" --input "$input"
  logged "$work/$cls-run2.log" "$jobhost" run -s "$job_dir" -c "$cls" \
    -D state.checkpoints.dir="$work/ckpt2-$cls" \
    "$plugin" --input "$input" --output-file "$work/$cls-out2.txt"
  # Counts continue: each word's last count covers the whole file, although the restored
  # run read only what follows the checkpointed position (fewer records than words).
  expected=$(word_counts "$input")
  actual=$(last_counts "$work/$cls-out2.txt")
  [[ $actual == "$expected" ]] ||
    fail "$cls: after the restore the counts are"$'\n'"$actual"$'\n'"expected"$'\n'"$expected"
  records=$(wc -l <"$work/$cls-out2.txt")
  words=$(wc -w <"$input")
  ((records < words)) ||
    fail "$cls: the restored run emitted $records records for $words words: it started over instead of continuing"
  echo "$cls: restored run emitted $records records; counts match all $words words"
done

step "restore check across backends is refused"
rocks_job=$(echo "$work"/ckpt-RocksWordCount/*)
set +e
"$jobhost" check -s "$rocks_job" -c HeapWordCount "$plugin" --input "$work/tiny.txt" >"$work/cross-check.log" 2>&1
rc=$?
set -e
[[ $rc -eq 3 ]] || {
  cat "$work/cross-check.log" >&2
  fail "checking a rocksdb-incremental snapshot against HeapWordCount exited $rc, expected 3"
}

echo "PASS"
