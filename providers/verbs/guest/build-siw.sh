#!/usr/bin/env bash
# Build Soft-iWARP (siw.ko) out of tree for kernel KVER and print its path.
#
# Usage: build-siw.sh KVER
#
# Debian's kernel is built without CONFIG_RDMA_SIW, so the guest's iWARP
# device needs the module built here: only drivers/infiniband/sw/siw/ is
# taken from the linux-source tarball of the same Debian version (package
# linux-source-<major.minor>) and compiled against the kernel's headers
# (linux-headers-KVER), with CONFIG_RDMA_SIW=m.  The module is cached under
# the cargo target directory (CARGO_TARGET_DIR, else ./target of the
# repository) as siw/KVER/siw.ko together with a stamp naming the header and
# source packages' versions; a later run with the same versions reuses it.
# Needs: linux-headers-KVER, linux-source-6.1, make, gcc, xz-utils.
# Everything but the printed path goes to standard error.
set -euo pipefail

prog=$(basename "$0")
die() { echo "$prog: error: $*" >&2; exit 2; }
note() { echo "$prog: $*" >&2; }

[ $# -eq 1 ] || die "usage: $prog KVER"
kver=$1
case "$kver" in ''|*/*) die "bad kernel version '$kver'" ;; esac

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
case "$target" in /*) ;; *) target=$root/$target ;; esac

# The kernel's build tree: /lib/modules/KVER/build, else the headers package.
kbuild=""
for d in "/lib/modules/$kver/build" "/usr/src/linux-headers-$kver"; do
    if [ -f "$d/Makefile" ]; then kbuild=$d; break; fi
done
[ -n "$kbuild" ] || die "no kernel build tree for $kver (install linux-headers-$kver)"

# The source tarball of the kernel's major.minor (6.1.0-56-amd64 -> 6.1).
series=$(printf '%s\n' "$kver" | sed -n 's/^\([0-9]*\.[0-9]*\).*/\1/p')
[ -n "$series" ] || die "cannot read a major.minor from $kver"
tarball=""
for t in /usr/src/linux-source-"$series".tar.xz /usr/src/linux-source-"$series".tar.bz2; do
    if [ -f "$t" ]; then tarball=$t; break; fi
done
[ -n "$tarball" ] || die "/usr/src/linux-source-$series.tar.xz missing (install linux-source-$series)"
for c in make gcc xz; do
    command -v "$c" >/dev/null 2>&1 || die "$c not found (install make, gcc, xz-utils)"
done

# Versions the module was built from: a change in either rebuilds it.
pkgver() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo unknown; }
stamp_text="headers $(pkgver "linux-headers-$kver") source $(pkgver "linux-source-$series") tarball $(stat -c '%s %Y' "$tarball")"

cache=$target/siw/$kver
if [ -f "$cache/siw.ko" ] && [ -f "$cache/stamp" ] && [ "$(cat "$cache/stamp")" = "$stamp_text" ]; then
    note "reusing $cache/siw.ko"
    printf '%s\n' "$cache/siw.ko"
    exit 0
fi

start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/build-siw.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Debian's tarball holds one directory named after the package.
top=linux-source-$series
tar -xJf "$tarball" -C "$work" "$top/drivers/infiniband/sw/siw" ||
    die "$tarball has no $top/drivers/infiniband/sw/siw"
src=$work/$top/drivers/infiniband/sw/siw
[ -f "$src/siw_main.c" ] || die "$tarball: siw sources incomplete"

note "building siw.ko for $kver from $tarball against $kbuild"
make -s -C "$kbuild" M="$src" CONFIG_RDMA_SIW=m modules >"$work/build.log" 2>&1 || {
    tail -n 40 "$work/build.log" >&2
    die "the siw module build failed"
}
[ -f "$src/siw.ko" ] || die "the build produced no siw.ko"
# The module must be for this very kernel, or insmod refuses it in the guest.
built_for=$(modinfo -F vermagic "$src/siw.ko" 2>/dev/null | cut -d' ' -f1 || true)
[ -z "$built_for" ] || [ "$built_for" = "$kver" ] ||
    die "siw.ko has vermagic $built_for, not $kver"

mkdir -p "$cache"
cp "$src/siw.ko" "$cache/siw.ko.tmp"
mv "$cache/siw.ko.tmp" "$cache/siw.ko"
printf '%s\n' "$stamp_text" >"$cache/stamp"
note "built $cache/siw.ko in $(( $(date +%s) - start ))s"
printf '%s\n' "$cache/siw.ko"
