#!/usr/bin/env bash
# Run a test script inside a QEMU guest that has a real verbs device
# (Soft-RoCE, rdma_rxe on top of a virtio-net eth0).
#
# Usage:
#   run-guest.sh [--timeout SECS] [--smp N] [--mem MB] [--siw] --script FILE
#                [--keep DIR] [FILE_OR_DIR...]
#
# The guest boots the newest /boot/vmlinuz-* kernel with an initramfs built
# here from the host's own binaries (host and guest are the same Debian):
# busybox-static, the needed kernel modules, the rdma user space, libfabric's
# fi_info/fi_pingpong, every FILE_OR_DIR (as /opt/<basename>) and every
# shared library ldd lists for all of them.  In the guest, /init sets up
# rxe0 on eth0 (10.0.2.15), waits for PORT_ACTIVE, runs the script as
# `sh /opt/test.sh` in /opt and prints one final line
# (with --siw, also a Soft-iWARP device siw0 on a dummy interface siw-eth,
# 10.0.3.15, its module built by build-siw.sh, both ports active before the
# script starts)
#   GUEST-RESULT: PASS         or   GUEST-RESULT: FAIL <status>
# The console is streamed to stdout and to a log; this script exits 0 only
# if the log holds GUEST-RESULT: PASS.
set -euo pipefail

prog=$(basename "$0")
die() { echo "$prog: error: $*" >&2; exit 2; }
warn() { echo "$prog: warning: $*" >&2; }
note() { echo "$prog: $*" >&2; }

usage() {
    sed -n '5,6p' "$0" | sed 's/^# *//' >&2
    exit 2
}

timeout_secs=1800
smp=2
mem=2048
script=""
keep=""
extras=()
siw=0

while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) [ $# -ge 2 ] || usage; timeout_secs=$2; shift 2 ;;
        --smp) [ $# -ge 2 ] || usage; smp=$2; shift 2 ;;
        --mem) [ $# -ge 2 ] || usage; mem=$2; shift 2 ;;
        --script) [ $# -ge 2 ] || usage; script=$2; shift 2 ;;
        --keep) [ $# -ge 2 ] || usage; keep=$2; shift 2 ;;
        --siw) siw=1; shift ;;
        -h|--help) usage ;;
        --) shift; extras+=("$@"); break ;;
        -*) die "unknown option $1" ;;
        *) extras+=("$1"); shift ;;
    esac
done

[ -n "$script" ] || usage
[ -f "$script" ] || die "script $script not found"
for n in "$timeout_secs" "$smp" "$mem"; do
    case "$n" in ''|*[!0-9]*) die "not a number: $n" ;; esac
done
for e in "${extras[@]}"; do
    [ -e "$e" ] || die "$e not found"
done

# Run a command as root: directly if we are root, else through sudo.
as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run: $* (not root and no sudo)"
    fi
}

need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found ($2)"; }
need qemu-system-x86_64 "install qemu-system-x86"
need cpio "install cpio"
need gzip "install gzip"
need ldd "install libc-bin"
need timeout "install coreutils"
# modprobe usually lives in /sbin, which a user's PATH may lack.
modprobe_bin=$(command -v modprobe || true)
[ -n "$modprobe_bin" ] || for c in /sbin/modprobe /usr/sbin/modprobe; do
    [ -x "$c" ] && modprobe_bin=$c && break
done
[ -n "$modprobe_bin" ] || die "modprobe not found (install kmod)"

# ---------------------------------------------------------------- kernel
kernel=$(find /boot -maxdepth 1 -name 'vmlinuz-*' 2>/dev/null | sort -V | tail -n 1)
[ -n "$kernel" ] || die "no /boot/vmlinuz-* (install linux-image-amd64)"
kver=${kernel#/boot/vmlinuz-}
moddir=/lib/modules/$kver
[ -d "$moddir" ] || die "$moddir missing for kernel $kver"

build_start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/run-guest.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
stage=$work/root
mkdir -p "$stage"

if [ -n "$keep" ]; then
    mkdir -p "$keep"
    outdir=$(cd "$keep" && pwd)
else
    outdir=$work
fi
initrd=$outdir/initramfs.cpio.gz
log=$outdir/console.log

# /boot/vmlinuz-* may be mode 0600: read it through sudo only if needed.
if [ -r "$kernel" ]; then
    kimage=$kernel
else
    kimage=$work/vmlinuz
    as_root cat "$kernel" >"$kimage"
fi

# ---------------------------------------------------------------- staging
# Mirror the host's merged-/usr symlinks (/lib -> usr/lib, ...) so that a
# file copied to the same absolute path lands where the host has it.
for d in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$d" ]; then
        t=$(readlink "/$d")
        case "$t" in /*) t=${t#/} ;; esac
        mkdir -p "$stage/$t"
        ln -s "$t" "$stage/$d"
    fi
done
mkdir -p "$stage"/{proc,sys,dev,tmp,run,etc,opt,root,usr/bin,usr/sbin}

# Copy host file SRC (dereferenced) to the same absolute path in the guest,
# or to DEST if given; an existing file or symlink is left alone.
add_file() {
    local src=$1 dst=${2:-$1}
    [ -e "$stage$dst" ] || [ -L "$stage$dst" ] && return 0
    mkdir -p "$stage$(dirname "$dst")"
    cp -L "$src" "$stage$dst"
}

# Add a command found on PATH (or in the sbin dirs); OPTIONAL=1 only warns.
add_cmd() {
    local name=$1 optional=${2:-0} p
    p=$(PATH="$PATH:/usr/sbin:/sbin" command -v "$name" || true)
    if [ -z "$p" ]; then
        if [ "$optional" = 1 ]; then
            note "$name not found, skipped"
            return 0
        fi
        warn "$name not found (guest will lack it)"
        return 0
    fi
    add_file "$p"
}

# busybox-static: the binary (same path as on the host) plus applet links.
busybox=$(dpkg -L busybox-static 2>/dev/null | grep '/busybox$' | head -n 1 || true)
[ -n "$busybox" ] && [ -x "$busybox" ] || busybox=$(command -v busybox || true)
[ -n "$busybox" ] || die "busybox not found (install busybox-static)"
"$busybox" --list-full >/dev/null 2>&1 || die "$busybox has no --list-full"
add_file "$busybox"

# Kernel modules with their dependencies, in load order, and the indexes.
modules=(virtio_pci virtio_net crc32_generic rdma_rxe ib_uverbs rdma_ucm)
# siw0 gets an interface of its own (a dummy one): rdma_cm picks a connection's
# device by its address, so siw0 beside rxe0 on eth0 would never be used.
if [ "$siw" = 1 ]; then modules+=(dummy); fi
compressed=0
for m in "${modules[@]}"; do
    deps=$("$modprobe_bin" -S "$kver" --show-depends "$m") ||
        die "modprobe --show-depends $m failed for $kver"
    while read -r kind path _; do
        [ "$kind" = insmod ] || continue
        add_file "$path"
        case "$path" in *.ko) ;; *) compressed=1 ;; esac
    done <<<"$deps"
done
# Soft-iWARP: Debian's kernel has no siw, so build-siw.sh builds it (cached)
# and it goes under extra/ with its dependencies (ib_core, libcrc32c, ...).
if [ "$siw" = 1 ]; then
    siw_ko=$("$(dirname "$0")/build-siw.sh" "$kver") || die "cannot build siw.ko for $kver"
    need depmod "install kmod"
    modinfo_bin=$(PATH="$PATH:/usr/sbin:/sbin" command -v modinfo) || die "modinfo not found (install kmod)"
    siw_deps=$("$modinfo_bin" -F depends "$siw_ko" | tr ',' ' ')
    for m in $siw_deps; do
        deps=$("$modprobe_bin" -S "$kver" --show-depends "$m") ||
            die "modprobe --show-depends $m (needed by siw) failed for $kver"
        while read -r kind path _; do
            [ "$kind" = insmod ] || continue
            add_file "$path"
            case "$path" in *.ko) ;; *) compressed=1 ;; esac
        done <<<"$deps"
    done
    add_file "$siw_ko" "$moddir/extra/siw.ko"
    modules+=(siw)
fi
for f in "$moddir"/modules.*; do
    add_file "$f"
done
# busybox modprobe may not read compressed modules: unpack them and rebuild
# the index for the subset we carry.
if [ "$compressed" = 1 ]; then
    need depmod "install kmod"
    while IFS= read -r f; do
        case "$f" in
            *.ko.xz) xz -d "$f" ;;
            *.ko.gz) gzip -d "$f" ;;
            *.ko.zst) zstd -q -d --rm "$f" ;;
        esac
    done < <(find "$stage$moddir" -name '*.ko.*')
fi
# The index must name the modules this guest carries (siw.ko is not in the
# host's): rebuild it for the subset whenever it differs from the host's.
if [ "$compressed" = 1 ] || [ "$siw" = 1 ]; then
    depmod -b "$stage" "$kver"
fi

# rdma user space: the rxe provider of libibverbs and its driver file.
rxe_libs=()
while IFS= read -r f; do rxe_libs+=("$f"); done < <(
    {
        dpkg -L ibverbs-providers 2>/dev/null || true
        ls /usr/lib/*/libibverbs/librxe-rdmav*.so /usr/lib*/libibverbs/librxe-rdmav*.so 2>/dev/null || true
    } | grep '/libibverbs/librxe-rdmav[0-9]*\.so$' | sort -u)
[ "${#rxe_libs[@]}" -gt 0 ] || die "librxe-rdmav*.so not found (install ibverbs-providers)"
for f in "${rxe_libs[@]}"; do
    [ -e "$f" ] && add_file "$f"
done
[ -e /etc/libibverbs.d/rxe.driver ] || die "/etc/libibverbs.d/rxe.driver missing (install ibverbs-providers)"
add_file /etc/libibverbs.d/rxe.driver
if [ "$siw" = 1 ]; then
    siw_lib=$(ls /usr/lib/*/libibverbs/libsiw-rdmav*.so /usr/lib*/libibverbs/libsiw-rdmav*.so 2>/dev/null | head -n 1 || true)
    [ -n "$siw_lib" ] || die "libsiw-rdmav*.so not found (install ibverbs-providers)"
    add_file "$siw_lib"
    [ -e /etc/libibverbs.d/siw.driver ] || die "/etc/libibverbs.d/siw.driver missing (install ibverbs-providers)"
    add_file /etc/libibverbs.d/siw.driver
fi
add_cmd rdma
add_cmd ibv_devinfo
add_cmd ibv_rc_pingpong
add_cmd rping 1
add_cmd rdma_server 1
add_cmd rdma_client 1
# ---- Debian's perftest (ib_send_lat & co.), when installed: ci.sh compares
# fabric's fi_send_lat & co. with it (fi-tools/perftest-compare.sh).
for t in send_lat send_bw write_lat write_bw read_lat read_bw atomic_lat atomic_bw; do
    add_cmd "ib_$t" 1
done
# ---- end of perftest

# libfabric's tools and, if libfabric has one, its dl provider directory.
add_cmd fi_info
add_cmd fi_pingpong
fi_tool=$(command -v fi_info || true)
if [ -n "$fi_tool" ]; then
    libfabric=$(ldd "$fi_tool" | awk '$1 ~ /^libfabric\.so/ && $3 ~ /^\// {print $3}' | head -n 1)
    if [ -n "$libfabric" ]; then
        for d in "$(dirname "$libfabric")/libfabric" "$(dirname "$(readlink -f "$libfabric")")/libfabric"; do
            if [ -d "$d" ]; then
                while IFS= read -r f; do add_file "$f"; done < <(find "$d" -type f -o -type l)
            fi
        done
    fi
fi

# libgcc_s.so.1: glibc dlopens it for thread cancellation/unwinding.
libgcc=$( { PATH="$PATH:/usr/sbin:/sbin" ldconfig -p 2>/dev/null || true; } |
    awk '$1 == "libgcc_s.so.1" && /x86-64/ {print $NF; exit}')
[ -n "$libgcc" ] || libgcc=$(dpkg -L libgcc-s1 2>/dev/null | grep '/libgcc_s\.so\.1$' | head -n 1 || true)
[ -n "$libgcc" ] || die "libgcc_s.so.1 not found"
add_file "$libgcc"

# The test script and the extra files/directories under /opt.
add_file "$script" /opt/test.sh
for e in "${extras[@]}"; do
    base=$(basename "$e")
    [ ! -e "$stage/opt/$base" ] || die "two files would be /opt/$base"
    if [ -d "$e" ]; then
        mkdir -p "$stage/opt/$base"
        cp -RL "$e/." "$stage/opt/$base/"
    else
        add_file "$e" "/opt/$base"
    fi
done
chmod -R a+rX "$stage/opt"

# Shared libraries of every ELF file staged so far (ldd lists the closure
# and the dynamic loader), kept at their absolute paths.
is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' \n')" = '177ELF' ]; }
missing=0
while IFS= read -r f; do
    is_elf "$f" || continue
    out=$(ldd "$f" 2>/dev/null) || continue   # static or not loadable
    while IFS= read -r line; do
        case "$line" in
            *"=> not found"*) warn "$f: ${line%%=>*}not found"; missing=1 ;;
        esac
    done <<<"$out"
    while IFS= read -r lib; do
        add_file "$lib"
    done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$out")
done < <(find "$stage" -type f ! -name '*.ko' ! -path "$stage/lib/modules/*" ! -path "$stage/usr/lib/modules/*")
[ "$missing" = 0 ] || warn "some libraries are missing; the guest may fail"

# busybox applet links, last so that they never shadow a real binary.
while IFS= read -r a; do
    [ -e "$stage/$a" ] || [ -L "$stage/$a" ] && continue
    mkdir -p "$stage/$(dirname "$a")"
    ln -s "$busybox" "$stage/$a"
done < <("$busybox" --list-full)

# Minimal name service files: localhost and the guest's own address.
cat >"$stage/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$stage/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
cat >"$stage/etc/hosts" <<'EOF'
127.0.0.1	localhost
10.0.2.15	guest
EOF
cat >"$stage/etc/nsswitch.conf" <<'EOF'
passwd: files
group: files
hosts: files
EOF
echo guest >"$stage/etc/hostname"

# ---------------------------------------------------------------- /init
{
    echo '#!/bin/sh'
    printf 'MODULES="%s"\n' "${modules[*]}"
    printf 'SIW=%s\n' "$siw"
    cat <<'EOF'
# Guest init: bring up rxe0, run /opt/test.sh, report, power off.
export PATH=/opt:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mount -t devtmpfs devtmpfs /dev 2>/dev/null
# The initramfs has no /dev/console node: attach to it now.
exec </dev/console >/dev/console 2>&1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
hostname guest
ulimit -l unlimited

result() {
    echo "GUEST-RESULT: $*"
    sync
    poweroff -f
    sleep 5
    exit 1
}

echo "guest: kernel $(uname -r), $(nproc) cpus, booted in $(cut -d' ' -f1 /proc/uptime) s"
for m in $MODULES; do
    modprobe "$m" || { echo "guest: modprobe $m failed"; dmesg | tail -n 20; result "FAIL setup:modprobe-$m"; }
done
ip link set lo up
ip link set eth0 up || { ip link; result "FAIL setup:eth0"; }
ip addr add 10.0.2.15/24 dev eth0
rdma link add rxe0 type rxe netdev eth0 || { dmesg | tail -n 20; result "FAIL setup:rxe"; }
devs=rxe0
if [ "$SIW" = 1 ]; then
    # Its own interface and address: the connection manager chooses a
    # connection's device by address, and for 10.0.2.15 (eth0) it takes rxe0.
    ip link add siw-eth type dummy || { ip link; result "FAIL setup:dummy"; }
    ip link set siw-eth up
    ip addr add 10.0.3.15/24 dev siw-eth
    rdma link add siw0 type siw netdev siw-eth || { dmesg | tail -n 20; result "FAIL setup:siw"; }
    devs="rxe0 siw0"
fi

# Bounded wait for the ports to become active.
for d in $devs; do
    i=0
    until ibv_devinfo -d "$d" 2>/dev/null | grep -q PORT_ACTIVE; do
        i=$((i + 1))
        if [ "$i" -gt 60 ]; then
            ibv_devinfo; rdma link; dmesg | tail -n 20
            result "FAIL setup:port-not-active-$d"
        fi
        sleep 1
    done
    echo "guest: $d PORT_ACTIVE after $(cut -d' ' -f1 /proc/uptime) s"
done
echo "guest: running /opt/test.sh"

cd /opt
sh /opt/test.sh
rc=$?
echo "guest: test finished at $(cut -d' ' -f1 /proc/uptime) s with status $rc"
if [ "$rc" -eq 0 ]; then
    result PASS
else
    result "FAIL $rc"
fi
EOF
} >"$stage/init"
chmod 755 "$stage/init"

# ---------------------------------------------------------------- cpio
(cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -6 >"$initrd"
note "kernel $kver, initramfs $(du -h "$initrd" | cut -f1) built in $(( $(date +%s) - build_start ))s"

# ---------------------------------------------------------------- boot
note "booting guest (timeout ${timeout_secs}s, smp $smp, mem ${mem}M)"
start=$(date +%s)
set +e
timeout --kill-after=10 "$timeout_secs" \
    qemu-system-x86_64 \
    -accel tcg,thread=multi -cpu max -smp "$smp" -m "$mem" \
    -nographic -no-reboot \
    -kernel "$kimage" -initrd "$initrd" \
    -append "console=ttyS0 quiet panic=-1" \
    -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
    </dev/null 2>&1 | tee "$log"
qemu_status=${PIPESTATUS[0]}
set -e
elapsed=$(( $(date +%s) - start ))

result=$(tr -d '\r' <"$log" | grep -a -o 'GUEST-RESULT: .*' | tail -n 1 || true)
[ -n "$keep" ] && note "kept $initrd and $log"
timed_out=0
if [ "$qemu_status" -eq 124 ] || [ "$qemu_status" -eq 137 ]; then
    timed_out=1
fi
if [ -z "$result" ]; then
    if [ "$timed_out" = 1 ]; then
        note "FAIL: TIMEOUT, the guest did not finish within ${timeout_secs}s and printed no GUEST-RESULT line"
    else
        note "FAIL: no GUEST-RESULT line on the console (qemu exit status $qemu_status after ${elapsed}s)"
    fi
    exit 1
fi
[ "$timed_out" = 1 ] && note "warning: the guest reported a result but did not power off within ${timeout_secs}s"
note "$result (guest run ${elapsed}s)"
[ "$result" = "GUEST-RESULT: PASS" ]
