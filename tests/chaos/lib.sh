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
