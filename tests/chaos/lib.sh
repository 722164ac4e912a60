# tests/chaos/lib.sh — shell functions the kill loops share (sourced, not run).

# newest_checkpoint JOB_DIR: the newest complete checkpoint directory of a job ("" if none).
newest_checkpoint() {
  local best=0 d n
  for d in "$1"/chk-*; do
    [ -f "$d/_metadata" ] || continue
    n=${d##*/chk-}
    [ "$n" -gt "$best" ] && best=$n
  done
  [ "$best" -gt 0 ] && echo "$1/chk-$best" || true
}

# job_dir_of_run CK_ROOT "BEFORE" PID: waits (up to 30 s) until a job directory under
# CK_ROOT that is not in BEFORE (a space-separated listing taken before the run started)
# has a complete checkpoint, and prints it; prints nothing if PID ended first.
job_dir_of_run() {
  local ck=$1 before=$2 pid=$3 mine="" waited=0 d
  while [ -z "$mine" ] && kill -0 "$pid" 2>/dev/null && [ $waited -lt 600 ]; do
    for d in "$ck"/*; do
      [ -d "$d" ] || continue
      case " $before " in *" ${d##*/} "*) continue ;; esac
      [ -n "$(newest_checkpoint "$d")" ] && mine=$d
    done
    sleep 0.05
    waited=$((waited + 1))
  done
  echo "$mine"
}

# kill_tree PID: after a random pause of up to 0.99 s, SIGKILLs PID's whole process group
# and waits until every process of it is gone.
kill_tree() {
  sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
  kill -9 -- -"$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  while pgrep -g "$1" >/dev/null 2>&1; do sleep 0.05; done
}

# chaos_setup NAME: the prologue of every kill loop. Sets `seed` ($SEED, else drawn; RANDOM
# is seeded with it, so SEED=<printed value> repeats a run) and `work`, a new directory
# $TMPDIR/jobhost-NAME.XXXXXX, with XDG_RUNTIME_DIR a private run/ inside it (the jobs'
# control sockets and working files stay in the loop's directory).
chaos_setup() {
  seed=${SEED:-$((RANDOM * 32768 + RANDOM))}
  RANDOM=$seed
  work=$(mktemp -d "${TMPDIR:-/tmp}/jobhost-$1.XXXXXX")
  export XDG_RUNTIME_DIR=$work/run
  mkdir -m 700 "$XDG_RUNTIME_DIR"
}

# remove_work: removes $work, or says where it is kept (KEEP=1, or after fail). The EXIT
# trap of a loop that starts no server; others call it from their own.
remove_work() { if [ "${KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi; }

# fail MESSAGE...: says FAILED, keeps the work directory, exits 1.
fail() {
  echo "FAILED: $*" >&2
  KEEP=1
  exit 1
}

# check_committed NAME OUT EXPECTED COMMITTED: the file sink's oracle. After a clean
# finish OUT holds no hidden (in-progress or pre-committed) part file, and its committed
# part files, sorted into COMMITTED, hold exactly the lines of EXPECTED (sorted): a lost
# record misses a line, one written twice repeats one.
check_committed() {
  local name=$1 out=$2 expected=$3 committed=$4 hidden
  hidden=$(find "$out" -name '.*' -type f | head -3)
  [ -z "$hidden" ] || fail "$name: hidden part files are left after a clean finish: $hidden"
  find "$out" -name 'part-*' -type f -exec cat {} + | sort >"$committed"
  if ! cmp -s "$expected" "$committed"; then
    echo "lines missing (<) or repeated/foreign (>), first ones:" >&2
    diff "$expected" "$committed" | grep '^[<>]' | head >&2 || true
    fail "$name: the committed output is not exactly the expected one"
  fi
}
