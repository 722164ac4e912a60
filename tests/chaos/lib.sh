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
