#!/usr/bin/env bash
# The container image (packaging/container/build.sh) built from this build tree's DEB and
# run the way a scheduler runs it, with podman (Debian's, --runtime runc):
#   - the image's user is not root (uid 10001) and `jobhost --version` runs in it;
#   - WordCount at p=2 with --job-id/--restore latest on a volume, killed (SIGKILL, as a
#     node loss) after its checkpoints, then started again on the same volume: it restores
#     the newest checkpoint and the final counts are exact;
#   - `podman stop` (SIGTERM to jobhost as PID 1) with execution.stop-with-savepoint-on-sigterm:
#     a savepoint on the volume and exit code 130 well before podman's SIGKILL.
# Where podman cannot start a container (no runtime that works on this kernel's cgroup
# setup), the same runs go through `chroot --userspec=10001:10001` on the image's root file
# system, and the script says so.
#
# usage: container_test.sh BUILD_DIR WORK_DIR WORDS_FILE
# Exits 77 (ctest: skipped) when debootstrap, buildah, podman, runc or root are missing,
# unless JOBHOST_REQUIRE_CONTAINER=1 (.ci/run installs them and sets it). The debootstrapped
# base root is kept in $JOBHOST_CONTAINER_BASE_CACHE (default ~/.cache/jobhost/; reused for a
# day) so a rebuild skips debootstrap. JOBHOST_CONTAINER_MODE=chroot forces the chroot runs.
set -euo pipefail

[[ $# -eq 3 ]] || { echo "usage: container_test.sh BUILD_DIR WORK_DIR WORDS_FILE" >&2; exit 2; }
build_dir=$1 work=$2 words=$3
here=$(cd "$(dirname "$0")" && pwd)
build_sh=$here/../../packaging/container/build.sh

missing=()
for tool in debootstrap buildah podman runc dpkg-deb; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[[ $(id -u) == 0 ]] || missing+=("root")
if [[ ${#missing[@]} -gt 0 ]]; then
  if [[ ${JOBHOST_REQUIRE_CONTAINER:-0} == 1 ]]; then
    echo "FAIL: missing ${missing[*]} (JOBHOST_REQUIRE_CONTAINER=1): apt-get install debootstrap buildah podman runc" >&2
    exit 1
  fi
  echo "skipping the container test: missing ${missing[*]} (Debian: apt-get install debootstrap buildah podman runc; as root)"
  exit 77
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
t0=$SECONDS
rm -rf "$work"
mkdir -p "$work"
cache=${JOBHOST_CONTAINER_BASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/jobhost/debootstrap-bookworm-minbase.tar}
bash "$build_sh" --build-dir "$build_dir" --work "$work/image" --base-cache "$cache" | tee "$work/build.log"
eval "$(tail -n1 "$work/build.log")"  # IMAGE, ARCHIVE, ROOTFS
t_build=$((SECONDS - t0))

# The volume: input and checkpoints, owned by the image's user.
vol=$work/volume
mkdir -p "$vol/input" "$vol/checkpoints" "$vol/savepoints"
for _ in $(seq 300); do cat "$words"; done >"$vol/input/words.txt"
chown -R 10001:10001 "$vol"

podman_run=(podman run --runtime runc --network none --ulimit nofile=20000:20000 --ulimit nproc=4096:4096
            -v "$vol:/var/lib/jobhost")
mode=podman
if [[ ${JOBHOST_CONTAINER_MODE:-} == chroot ]]; then
  mode=chroot  # the fallback, forced (to test it)
elif ! out=$("${podman_run[@]}" --rm "$IMAGE" --version 2>&1); then
  echo "podman cannot run a container here ($out): the runs go through chroot on the image's root file system"
  mode=chroot
fi
echo "runtime: $mode"
names=()
cleanup() {
  for n in "${names[@]}"; do podman rm -f "$n" >/dev/null 2>&1 || true; done
  mountpoint -q "$ROOTFS/var/lib/jobhost" 2>/dev/null && umount -l "$ROOTFS/var/lib/jobhost" || true
  mountpoint -q "$ROOTFS/proc" 2>/dev/null && umount -l "$ROOTFS/proc" || true
}
trap cleanup EXIT
if [[ $mode == chroot ]]; then
  mount --bind "$vol" "$ROOTFS/var/lib/jobhost"
  mount -t proc proc "$ROOTFS/proc"
fi

# start NAME ARGS...: the job in the background (stdout NAME.out, stderr NAME.err)
start() {
  local name=$1
  shift
  export W=$work/$name
  if [[ $mode == podman ]]; then
    names+=("$name")
    podman rm -f "$name" >/dev/null 2>&1 || true
    "${podman_run[@]}" -d --name "$name" "$IMAGE" "$@" >/dev/null
  else
    # A session of its own (kill -9 of the group is the node loss); jobhost's pid in NAME.pid,
    # its exit code in NAME.rc (none: it was killed with its group).
    rm -f "$work/$name.pid" "$work/$name.rc"
    setsid sh -c 'chroot --userspec=10001:10001 "$0" /usr/bin/env HOME=/var/lib/jobhost JOBHOST_HOME=/var/lib/jobhost \
      /usr/bin/jobhost "$@" >"$W.out" 2>"$W.err" & echo $! >"$W.pid"; wait $!; echo $? >"$W.rc"' \
      "$ROOTFS" "$@" &
    for _ in $(seq 100); do [[ -s $work/$name.pid ]] && break; sleep 0.05; done
  fi
}
# finish NAME [timeout]: waits for the job to exit; prints its exit code; collects its output
finish() {
  local name=$1 timeout=${2:-300} rc
  if [[ $mode == podman ]]; then
    rc=$(timeout "$timeout" podman wait "$name") || fail "$name did not end within $timeout s"
    podman logs "$name" >"$work/$name.out" 2>"$work/$name.err"
  else
    local pid
    pid=$(cat "$work/$name.pid")
    for _ in $(seq $((timeout * 10))); do [[ -s $work/$name.rc ]] || kill -0 "$pid" 2>/dev/null || break; [[ -s $work/$name.rc ]] && break; sleep 0.1; done
    [[ -s $work/$name.rc ]] || ! kill -0 "$pid" 2>/dev/null || fail "$name did not end within $timeout s"
    sleep 0.2
    rc=$(cat "$work/$name.rc" 2>/dev/null || echo 137)
  fi
  echo "$rc"
}
# signal NAME SIG
signal() {
  if [[ $mode == podman ]]; then podman kill -s "$2" "$1" >/dev/null
  elif [[ $2 == KILL ]]; then kill -KILL -- "-$(ps -o pgid= -p "$(cat "$work/$1.pid")" | tr -d ' ')"
  else kill -"$2" "$(cat "$work/$1.pid")"; fi
}
# wait_checkpoints JOB_ID N: until the job's directory on the volume holds chk-N or later
wait_checkpoints() {
  for _ in $(seq 600); do
    local n
    n=$(find "$vol/checkpoints/$1" -maxdepth 2 -name _metadata 2>/dev/null | sed -E 's|.*/chk-([0-9]+)/_metadata|\1|' | sort -n | tail -n1) || true
    [[ -n $n && $n -ge $2 ]] && return 0
    sleep 0.1
  done
  fail "job $1 wrote no checkpoint $2 within 60 s"
}
user=$("${podman_run[@]}" --rm --entrypoint id "$IMAGE" -u 2>/dev/null || chroot --userspec=10001:10001 "$ROOTFS" id -u)
[[ $mode == chroot ]] || [[ $(podman inspect --format '{{.Config.User}}' "$IMAGE") == 10001:10001 ]] || fail "the image's user is not 10001"
[[ $user == 10001 ]] || fail "the container runs as uid $user, not 10001"

job=(run --job-id wordcount --restore latest -D execution.checkpointing.interval=200ms -p 2 -c WordCount
     /usr/lib/jobhost/plugins/libwordcount_jobs.so --input /var/lib/jobhost/input/words.txt)
t1=$SECONDS
start first "${job[@]}" --rate 1000  # ~4 s of input: killed after its third checkpoint
wait_checkpoints wordcount 3
signal first KILL
rc=$(finish first 60)
[[ $rc == 137 || $rc == 9 || $mode == chroot ]] || echo "note: the killed run ended with $rc"
start second "${job[@]}"
rc=$(finish second 300)
[[ $rc == 0 ]] || { cat "$work/second.err" >&2; fail "the restarted job exited with $rc"; }
grep -q -- "--restore latest: restoring /var/lib/jobhost/checkpoints/wordcount/chk-" "$work/second.err" ||
  { cat "$work/second.err" >&2; fail "the restarted job did not restore the newest checkpoint"; }

# Exact counts: the largest count printed per word over both runs, against the input.
final_counts() { sed -nE 's/^([0-9]+> )?\((.*),([0-9]+)\)$/\2 \3/p' "$@" | sort -k1,1 -k2,2n | awk '{c[$1]=$2} END {for (w in c) print w, c[w]}' | sort; }
final_counts "$work/first.out" "$work/second.out" >"$work/counts.txt"
tr -s '[:space:]' '\n' <"$vol/input/words.txt" | grep -v '^$' | tr '[:upper:]' '[:lower:]' | sort | uniq -c |
  awk '{print $2, $1}' | sort >"$work/expected.txt"
diff "$work/expected.txt" "$work/counts.txt" >"$work/counts.diff" || { head -n 20 "$work/counts.diff" >&2; fail "the counts after kill + restore are not exact"; }
echo "exact counts for $(wc -l <"$work/expected.txt") words after kill -9 and --restore latest"
t_kill=$((SECONDS - t1))

# SIGTERM to PID 1: a stop with a savepoint, exit 130, long before podman's SIGKILL.
t2=$SECONDS
start third run --job-id stopping --restore latest -D execution.checkpointing.interval=200ms \
  -D execution.stop-with-savepoint-on-sigterm=true -D state.savepoints.dir=/var/lib/jobhost/savepoints \
  -c WordCount /usr/lib/jobhost/plugins/libwordcount_jobs.so --input /var/lib/jobhost/input/words.txt --rate 500
wait_checkpoints stopping 2
stop_start=$SECONDS
if [[ $mode == podman ]]; then podman stop -t 60 third >/dev/null; else signal third TERM; fi
rc=$(finish third 90)
stop_took=$((SECONDS - stop_start))
[[ $rc == 130 ]] || { cat "$work/third.err" >&2; fail "SIGTERM: exit code $rc, expected 130 (137 = podman had to SIGKILL)"; }
[[ $stop_took -lt 30 ]] || fail "SIGTERM: the stop took $stop_took s"
compgen -G "$vol/savepoints/savepoint-*/_metadata" >/dev/null || { cat "$work/third.err" >&2; fail "SIGTERM: no savepoint"; }
grep -q "stopped with savepoint" "$work/third.err" || fail "SIGTERM: the log does not name the savepoint"
t_term=$((SECONDS - t2))
echo "PASS ($mode): image $IMAGE, non-root, kill + restore exact, SIGTERM$([[ $mode == podman ]] && echo " to PID 1") -> savepoint + exit 130 in ${stop_took} s;" \
  "build ${t_build} s, kill/restore ${t_kill} s, SIGTERM ${t_term} s, total $((SECONDS - t0)) s"
