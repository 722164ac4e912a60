#!/usr/bin/env bash
# tests/s3/rgw.sh — a throw-away single-node Ceph cluster with the S3 gateway, for tests.
#
#   tests/s3/rgw.sh start DIR   # prints S3_ENDPOINT=… S3_ACCESS_KEY=… S3_SECRET_KEY=… S3_BUCKET=…
#   eval "$(tests/s3/rgw.sh start DIR)"
#   tests/s3/rgw.sh stop DIR    # SIGTERM by pid (rgw, osd, mon), waits, removes nothing
#
# One monitor, one OSD with the in-memory store (memstore), one radosgw (beast) on
# 127.0.0.1 at free ports; cephx with one generated keyring; every file (config, data,
# logs, sockets, pids) under DIR. Needs Debian's ceph-mon, ceph-osd, radosgw and
# ceph-common; exit code 3 if they are missing (tests skip on it), 1 on any other failure
# (the daemons' logs in DIR/log are named). The start-up time goes to stderr.
# Settings and pitfalls: ../shared/reference/ceph-rgw-postgres-containers.md (next to the
# repository checkout).
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
cmd=$1
dir=$2

free_port() {
  python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

stop_cluster() {
  local pids=()
  for name in rgw osd mon; do
    local f="$dir/run/$name.pid"
    [[ -f $f ]] || continue
    local pid
    pid=$(cat "$f")
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  # Wait up to 20 s for all of them, then SIGKILL what is left.
  for _ in $(seq 200); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for name in rgw osd mon; do rm -f "$dir/run/$name.pid"; done
}

case $cmd in
  stop)
    stop_cluster
    exit 0
    ;;
  start) ;;
  *) usage ;;
esac

if ! command -v curl >/dev/null && ! command -v aws >/dev/null; then
  echo "rgw.sh: neither curl nor aws found (one creates the bucket): apt-get install -y curl" >&2
  exit 3
fi
for tool in ceph-mon ceph-osd radosgw radosgw-admin ceph-authtool monmaptool ceph python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "rgw.sh: $tool not found; install Ceph: apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw ceph-common" >&2
    exit 3
  fi
done

started=$(date +%s%N)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [[ ${#dir} -gt 60 ]]; then
  # Admin socket paths over 107 characters are silently dropped.
  echo "rgw.sh: DIR is too long (${#dir} characters, at most 60): $dir" >&2
  exit 1
fi
if [[ -e $dir/run/mon.pid ]]; then
  echo "rgw.sh: $dir already has a cluster (run '$0 stop $dir' first)" >&2
  exit 1
fi
mkdir -p "$dir"/{run,log,mon,osd}
trap 'rc=$?; if [[ $rc -ne 0 ]]; then echo "rgw.sh: start failed; logs in $dir/log" >&2; stop_cluster; fi' EXIT

mon_port=$(free_port)
rgw_port=$(free_port)
while [[ $rgw_port == "$mon_port" ]]; do rgw_port=$(free_port); done
fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
conf=$dir/ceph.conf

cat >"$conf" <<EOF
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$mon_port
public_addr = 127.0.0.1
ms_bind_ipv6 = false
ms_bind_msgr1 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
keyring = $dir/keyring
run_dir = $dir/run
log_file = $dir/log/\$name.log
admin_socket = $dir/run/\$name.asok
pid_file = $dir/run/\$name.pid.ceph
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 1
mon_data_avail_crit = 0
paxos_propose_interval = 0.1
osd_crush_chooseleaf_type = 0
[mon]
mon_data = $dir/mon/\$cluster-\$id
[osd]
osd_data = $dir/osd/\$cluster-\$id
osd_objectstore = memstore
memstore_device_bytes = 1073741824
osd_max_object_name_len = 256
osd_max_object_namespace_len = 64
[client.rgw.gw]
rgw_frontends = beast endpoint=127.0.0.1:$rgw_port
rgw_data = $dir/rgw
rgw_dns_name = 127.0.0.1
log_file = $dir/log/rgw.log
EOF

kr=$dir/keyring
ceph-authtool --create-keyring "$kr" --gen-key -n mon. --cap mon 'allow *' >/dev/null
ceph-authtool "$kr" --gen-key -n client.admin --cap mon 'allow *' --cap osd 'allow *' \
  --cap mds 'allow *' --cap mgr 'allow *' >/dev/null
ceph-authtool "$kr" --gen-key -n osd.0 --cap mon 'allow profile osd' --cap osd 'allow *' >/dev/null
ceph-authtool "$kr" --gen-key -n client.rgw.gw --cap mon 'allow rw' --cap osd 'allow rwx' >/dev/null
monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null

C=(-c "$conf")
ceph-mon "${C[@]}" --mkfs -i a --monmap "$dir/monmap" --keyring "$kr"
ceph-mon "${C[@]}" -i a 2>>"$dir/log/daemons.err"
cat "$dir/run/mon.a.pid.ceph" >"$dir/run/mon.pid"

osd_uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
ceph "${C[@]}" -n client.admin osd new "$osd_uuid" 0 >/dev/null
mkdir -p "$dir/osd/ceph-0"
ceph-osd "${C[@]}" -i 0 --mkfs --osd-uuid "$osd_uuid" >/dev/null 2>"$dir/log/osd-mkfs.err"
cp "$kr" "$dir/osd/ceph-0/keyring"
ceph-osd "${C[@]}" -i 0 2>>"$dir/log/daemons.err"
cat "$dir/run/osd.0.pid.ceph" >"$dir/run/osd.pid"

radosgw "${C[@]}" -n client.rgw.gw 2>>"$dir/log/daemons.err"
# radosgw writes its pid file only once it runs; wait for it and the port.
for _ in $(seq 300); do
  [[ -s $dir/run/client.rgw.gw.pid.ceph ]] && break
  sleep 0.1
done
cat "$dir/run/client.rgw.gw.pid.ceph" >"$dir/run/rgw.pid"
endpoint=http://127.0.0.1:$rgw_port
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$rgw_port") 2>/dev/null; }
for _ in $(seq 600); do
  port_open && break
  sleep 0.1
done
port_open || { echo "rgw.sh: radosgw does not answer at $endpoint" >&2; exit 1; }

user_json=$(radosgw-admin "${C[@]}" -n client.admin user create --uid=jobhost-test --display-name=jobhost-test 2>"$dir/log/user-create.err")
access_key=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["keys"][0]["access_key"])' <<<"$user_json")
secret_key=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["keys"][0]["secret_key"])' <<<"$user_json")
bucket=jobhost-test

# The bucket: a signed PUT (curl's own SigV4), else through awscli.
code=""
for _ in $(seq 50); do
  if command -v curl >/dev/null; then
    code=$(curl -s -o "$dir/log/bucket-create.out" -w '%{http_code}' -X PUT \
      --aws-sigv4 "aws:amz:us-east-1:s3" --user "$access_key:$secret_key" \
      -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$endpoint/$bucket") || true
  elif AWS_ACCESS_KEY_ID=$access_key AWS_SECRET_ACCESS_KEY=$secret_key AWS_DEFAULT_REGION=us-east-1 \
    aws --endpoint-url "$endpoint" s3api create-bucket --bucket "$bucket" >"$dir/log/bucket-create.out" 2>&1; then
    code=200
  fi
  [[ $code == 200 ]] && break
  sleep 0.1
done
if [[ $code != 200 ]]; then
  echo "rgw.sh: cannot create bucket $bucket (HTTP $code): $(cat "$dir/log/bucket-create.out")" >&2
  exit 1
fi

trap - EXIT
ended=$(date +%s%N)
echo "S3_ENDPOINT=$endpoint"
echo "S3_ACCESS_KEY=$access_key"
echo "S3_SECRET_KEY=$secret_key"
echo "S3_BUCKET=$bucket"
ms=$(((ended - started) / 1000000))
printf 'rgw.sh: single-node Ceph RGW at %s started in %d.%d s (DIR %s)\n' "$endpoint" $((ms / 1000)) $((ms % 1000 / 100)) "$dir" >&2
