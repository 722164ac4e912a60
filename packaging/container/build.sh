#!/usr/bin/env bash
# Builds the jobhost container image from the project's DEB, without a registry:
#
#   1. the DEB, with CPack from a configured and built build tree (packaging/CMakeLists.txt)
#   2. a Debian 12 root file system: debootstrap --variant=minbase from the mirror apt
#      already uses (the only step that downloads: ~45 MB)
#   3. the DEB installed into it with apt-get --no-install-recommends (its dependencies
#      from the same mirror), user jobhost (uid 10001) and /var/lib/jobhost
#   4. buildah: FROM scratch + ADD of that root (Containerfile; --pull=never, and no RUN
#      step, so nothing runs and nothing is fetched), committed as localhost/jobhost:<version>
#      and written to an OCI archive (podman load -i / skopeo copy take it anywhere)
#
# usage: build.sh --build-dir DIR --work WORK [--tag TAG] [--base-cache FILE]
#   --base-cache FILE: keep the debootstrapped root as FILE (tar) and reuse it while it is
#                      younger than a day (a second build then needs no debootstrap)
# Prints, last: IMAGE=<tag> ARCHIVE=<oci archive> ROOTFS=<root file system directory>
# Needs (Debian): debootstrap, buildah, dpkg-deb; runs as root (debootstrap, chroot).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build_dir= work= tag= base_cache=
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) build_dir=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --base-cache) base_cache=$2; shift 2 ;;
    *) echo "usage: build.sh --build-dir DIR --work WORK [--tag TAG] [--base-cache FILE]" >&2; exit 2 ;;
  esac
done
[[ -n $build_dir && -n $work ]] || { echo "build.sh: --build-dir and --work are required" >&2; exit 2; }
for tool in debootstrap buildah dpkg-deb chroot; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool not found (apt-get install debootstrap buildah)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "build.sh: debootstrap and chroot need root" >&2; exit 2; }

step() { echo "== $* ($(date +%T))"; }
t0=$SECONDS
mkdir -p "$work"
work=$(cd "$work" && pwd)
root=$work/rootfs

step "the DEB (cpack)"
rm -rf "$work/deb"
cpack --config "$build_dir/CPackConfig.cmake" -G DEB -B "$work/deb" >"$work/cpack.log" 2>&1 || { cat "$work/cpack.log" >&2; exit 1; }
deb=$(compgen -G "$work/deb/*.deb" | head -n1)
version=$(dpkg-deb -f "$deb" Version)
tag=${tag:-localhost/jobhost:$version}
echo "$deb ($version)"

# The mirror apt uses for bookworm (apt's own index targets), else Debian's.
mirror=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Identifier: Packages' 2>/dev/null |
  awk '$2 == "bookworm" {print $1; exit}')
mirror=${mirror:-http://deb.debian.org/debian/}

umount_all() {
  for m in proc dev/pts; do mountpoint -q "$root/$m" 2>/dev/null && umount -l "$root/$m" || true; done
}
trap umount_all EXIT
umount_all
rm -rf "$root"
if [[ -n $base_cache && -f $base_cache && -n $(find "$base_cache" -mmin -1440 2>/dev/null) ]]; then
  step "Debian 12 root from $base_cache"
  mkdir -p "$root"
  tar -C "$root" -xf "$base_cache"
else
  step "Debian 12 root: debootstrap --variant=minbase bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
  if [[ -n $base_cache ]]; then
    mkdir -p "$(dirname "$base_cache")"
    tar -C "$root" --numeric-owner -cf "$base_cache.tmp" . && mv "$base_cache.tmp" "$base_cache"
  fi
fi

step "jobhost installed into the root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# Debian's updates and security fixes too, from the mirrors apt uses here.
apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Identifier: Packages' 2>/dev/null |
  awk '$2 ~ /^bookworm(-updates|-security)?$/ {print "deb " $1 " " $2 " main"}' | sort -u >"$work/sources.list"
[[ -s $work/sources.list ]] && cp "$work/sources.list" "$root/etc/apt/sources.list"
mount -t proc proc "$root/proc"
cp "$deb" "$root/tmp/jobhost.deb"
# The package lists: this machine's own, from the same mirrors (verified by apt here; saves
# their download, ~30 s), else `apt-get update` in the root.
install_deb() {
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    /tmp/jobhost.deb >>"$work/apt.log" 2>&1
}
: >"$work/apt.log"
copied=0
if [[ -s $work/sources.list ]] && compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
  cp /var/lib/apt/lists/*_InRelease /var/lib/apt/lists/*_Packages* "$root/var/lib/apt/lists/" 2>/dev/null && copied=1
fi
if [[ $copied == 0 ]] || ! install_deb; then
  chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$work/apt.log" 2>&1 ||
    { cat "$work/apt.log" >&2; exit 1; }
  install_deb || { tail -n 30 "$work/apt.log" >&2; exit 1; }
fi
chroot "$root" groupadd --gid 10001 jobhost
chroot "$root" useradd --no-create-home --uid 10001 --gid 10001 --home-dir /var/lib/jobhost --shell /usr/sbin/nologin jobhost
mkdir -p "$root/var/lib/jobhost"/{checkpoints,savepoints,input}
chroot "$root" chown -R 10001:10001 /var/lib/jobhost
chroot "$root" jobhost --version
umount_all
# What an image does not need: package lists and caches, the DEB, docs and man pages
# (the README stays in /usr/share/doc/jobhost), our resolv.conf.
rm -rf "$root/tmp/jobhost.deb" "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
  "$root"/var/log/*.log "$root"/usr/share/man
find "$root/usr/share/doc" -mindepth 1 -maxdepth 1 ! -name jobhost -exec rm -rf {} +
: >"$root/etc/resolv.conf"

step "image $tag (buildah: nothing runs, nothing is fetched)"
rm -f "$work/rootfs.tar"
tar -C "$root" --numeric-owner -cf "$work/rootfs.tar" .
cp "$here/Containerfile" "$work/Containerfile"
buildah build --quiet --isolation chroot --pull=never --layers=false -f "$work/Containerfile" -t "$tag" "$work" \
  >"$work/buildah.log" 2>&1 || { cat "$work/buildah.log" >&2; exit 1; }
archive=$work/jobhost-$version.oci.tar
rm -f "$archive"
buildah push --quiet "$tag" "oci-archive:$archive:$tag" >>"$work/buildah.log" 2>&1 || { cat "$work/buildah.log" >&2; exit 1; }
rm -f "$work/rootfs.tar"
echo "image $tag: $(du -m "$archive" | cut -f1) MB as an OCI archive, built in $((SECONDS - t0)) s"
echo "IMAGE=$tag ARCHIVE=$archive ROOTFS=$root"
