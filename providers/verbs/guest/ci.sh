#!/usr/bin/env bash
# The verbs provider, tested for real: build fabric with the `verbs` feature on
# the host, boot a QEMU guest with a Soft-RoCE device (run-guest.sh) and run in
# it, failing when any of these fails:
#   1. fi_info -p verbs (both endpoint types listed; the reasons logged),
#   2. fi_pingpong -p verbs -e msg and -e rdm, every size, data checked (-c);
#      -e msg on the MSG direct path (the default), and also on the engine's
#      protocol (FI_VERBS_MSG_DIRECT=0),
#   3. the conformance suite on verbs (cargo test's `verbs::` tests), twice: RDM
#      connections on the endpoint's shared receive queue, then each with its own
#      buffers (FI_VERBS_USE_SRQ=0); the allocation test (no_alloc.rs) and the
#      teardown under automatic progress (auto_teardown.rs); with
#      FABRIC_REQUIRE=verbs, so a test that finds no verbs device fails, and the
#      skips the provider's Info explains counted and listed (fabric/testkit),
#   4. ours against libfabric's fi_pingpong -p verbs -e rdm at 64 B, 4 KiB and
#      1 MiB, and -e msg at 64 B, 4 KiB and 64 KiB (the direct path, the default,
#      then the engine's protocol: "VERBS-RATIO msg-engine"), side by side in the same guest, five alternating runs each, with
#      the ratios of the medians and of the best runs printed (only when
#      libfabric's fi_pingpong is installed; emulation sets the absolute figures),
#   5. the source GID of the QPs: the domain's by default, FI_VERBS_GID_IDX's when
#      set, also where the connection manager would pick another (read back from
#      the QP and logged at FI_LOG_LEVEL=info),
#   6. the async echo server (examples/async_echo: one tokio task, four client
#      processes) over verbs,
#   7. Soft-iWARP: the guest also has siw0 (run-guest.sh --siw, the module
#      built by build-siw.sh) on its own interface (siw-eth, 10.0.3.15); the
#      RoCE checks are pinned to rxe0 (FI_VERBS_DEVICE_NAME); fi_info must offer
#      siw0 as an iWARP domain (FI_PROTO_IWARP, remote CQ data of 8 bytes: a
#      SEND after the write); over siw0, fi_pingpong msg and rdm (-S all -c),
#      Debian's fi_pingpong over our libfabric.so.1, ours against libfabric
#      1.17's verbs (SIW-RATIO lines), and the conformance suite (a gate:
#      SIW-CONFORMANCE counts, any failure or a run past 300 s fails the run).
#
# Usage: ci.sh [--timeout SECS] [--keep DIR]
# Needs: rdma-core development packages and the guest's packages (README.md,
# "The verbs provider"); .ci/run installs them.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
timeout=${VERBS_GUEST_TIMEOUT:-3000}
keep=()
while [ $# -gt 0 ]; do
    case "$1" in
        --timeout) timeout=$2; shift 2 ;;
        --keep) keep=(--keep "$2"); shift 2 ;;
        *) echo "ci.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

cd "$root"
echo "ci.sh: building fi-tools and the conformance suite with the verbs feature"
# What this very build produced, wherever cargo puts it (fi-tools/built.sh).
tools=$(fi-tools/built.sh build -j2 --release -p fi-tools --features verbs)
# A cdylib's file name carries no hash of its features, so a build without verbs
# in the same profile may have left its libfabric.so.1 under a fingerprint cargo
# then finds fresh: touching the crate makes cargo link this feature set again,
# and the check below refuses a library that does not use libibverbs.
touch fabric/capi/src/lib.rs
capi=$(fi-tools/built.sh build -j2 --release -p fabric-capi --features verbs)
ex=$(fi-tools/built.sh build -j2 --release -p fabric-examples --features verbs --bin async_echo)
tests=$(fi-tools/built.sh test -j2 --release -p fabric --features verbs --test conformance --test no_alloc \
    --test auto_teardown --no-run)
bin() { printf '%s\n' "$1" | awk -v n="$2" '$1 == n { p = $2 } END { print p }'; }
fi_info=$(bin "$tools" fi_info)
fi_pingpong=$(bin "$tools" fi_pingpong)
conf=$(bin "$tests" conformance)
noalloc=$(bin "$tests" no_alloc)
teardown=$(bin "$tests" auto_teardown)
libfabric=$(dirname "$(bin "$capi" fabric_capi.so)")/libfabric.so.1
[ -f "$libfabric" ] || { echo "ci.sh: the build did not produce libfabric.so.1" >&2; exit 1; }
readelf -d "$libfabric" | grep -q "libibverbs" ||
    { echo "ci.sh: $libfabric was not linked with the verbs provider (no libibverbs in NEEDED)" >&2; exit 1; }
for b in "$fi_info" "$fi_pingpong" "$conf" "$noalloc" "$teardown"; do
    [ -x "$b" ] || { echo "ci.sh: the build did not produce every program (fi_info, fi_pingpong, conformance, no_alloc, auto_teardown)" >&2; exit 1; }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp "$fi_info" "$fi_pingpong" "$stage/"
cp "$conf" "$stage/conformance"
cp "$noalloc" "$stage/no_alloc"
cp "$teardown" "$stage/auto_teardown"
cp fabric/testkit/skips.sh "$stage/"
async_echo=$(bin "$ex" async_echo)
[ -x "$async_echo" ] || { echo "ci.sh: the build did not produce async_echo" >&2; exit 1; }
cp "$async_echo" examples/async_echo_check.sh "$stage/"
mkdir -p "$stage/capi"
cp "$libfabric" "$stage/capi/"

cat > "$stage/test.sh" <<'EOF'
# Runs in the guest (busybox sh), in /opt.
set -u
addr=10.0.2.15
# Two devices share eth0 (rxe0, siw0): the RoCE checks are pinned to rxe0, for
# ours and for libfabric's verbs provider alike.
export FI_VERBS_DEVICE_NAME=rxe0
step() { echo; echo "==== $*"; }
die() { echo "VERBS-CI FAIL: $*"; exit 1; }

step "fi_info -p verbs"
FI_LOG_LEVEL=info ./fi_info -p verbs > info.txt 2>&1 || { cat info.txt; die "fi_info -p verbs"; }
cat info.txt
grep -q FI_EP_MSG info.txt || die "fi_info lists no MSG endpoint"
grep -q FI_EP_RDM info.txt || die "fi_info lists no RDM endpoint"
./fi_info -p verbs -t FI_EP_RDM -v | head -90

step "fi_info -p verbs on siw0 (Soft-iWARP): an iWARP domain"
FI_VERBS_DEVICE_NAME=siw0 FI_LOG_LEVEL=info ./fi_info -p verbs > iw-info.txt 2>&1 || { cat iw-info.txt; die "fi_info -p verbs on siw0"; }
grep -v "excluded by hints" iw-info.txt
grep -q "domain: siw0" iw-info.txt || die "fi_info offers no siw0 domain"
grep -q FI_PROTO_IWARP iw-info.txt || die "siw0's MSG entry is not FI_PROTO_IWARP"
grep -q FI_EP_RDM iw-info.txt || die "siw0 has no RDM entry"
FI_VERBS_DEVICE_NAME=siw0 ./fi_info -p verbs -t FI_EP_MSG -v > iw-msg.txt 2>&1 || die "fi_info -v on siw0"
grep -E "^    caps:|cq_data_size|protocol:" iw-msg.txt
# No write with immediate data on iWARP: the data goes in a SEND after the
# write, 8 bytes of it (RoCE: 4, the immediate data).
grep -q "cq_data_size: 8" iw-msg.txt || die "siw0 does not offer 8 bytes of remote CQ data (a SEND after the write)"
grep "^    caps:" iw-msg.txt | grep -q FI_REMOTE_CQ_DATA || die "siw0's MSG caps lack FI_REMOTE_CQ_DATA"

# pp PROGRAM ENDPOINT ARGS...: server in the background, client to $addr.
pp() {
    prog=$1; shift
    ep=$1; shift
    $prog -p verbs -e "$ep" "$@" > srv.txt 2>&1 &
    spid=$!
    sleep 1
    if ! timeout "${PP_TIMEOUT:-600}" $prog -p verbs -e "$ep" "$@" $addr > cli.txt 2>&1; then
        cat cli.txt; echo "-- server:"; cat srv.txt; kill $spid 2>/dev/null; return 1
    fi
    if ! wait $spid; then cat cli.txt; echo "-- server:"; cat srv.txt; return 1; fi
    cat cli.txt
}

step "fi_pingpong -p verbs -e msg -S all -c (the direct data path, the default)"
FI_LOG_LEVEL=info pp ./fi_pingpong msg -S 64 -I 10 -c > /dev/null 2>&1 || die "fi_pingpong msg, direct path"
grep -q "direct data path" cli.txt && grep -q "direct data path" srv.txt || { cat cli.txt srv.txt; die "fi_pingpong msg did not take the direct path"; }
pp ./fi_pingpong msg -S all -I 20 -c || die "fi_pingpong msg"
step "fi_pingpong -p verbs -e msg -S all -c on the engine's protocol (FI_VERBS_MSG_DIRECT=0)"
FI_VERBS_MSG_DIRECT=0 FI_LOG_LEVEL=info pp ./fi_pingpong msg -S 64 -I 10 -c > /dev/null 2>&1 || die "fi_pingpong msg, engine"
! grep -q "direct data path" cli.txt srv.txt || { cat cli.txt srv.txt; die "FI_VERBS_MSG_DIRECT=0: fi_pingpong msg took the direct path"; }
FI_VERBS_MSG_DIRECT=0 pp ./fi_pingpong msg -S all -I 20 -c || die "fi_pingpong msg, engine"
step "fi_pingpong -p verbs -e rdm -S all -c"
pp ./fi_pingpong rdm -S all -I 20 -c || die "fi_pingpong rdm"
step "fi_pingpong -p verbs -e rdm -m tagged -S 4096 -c"
pp ./fi_pingpong rdm -m tagged -S 4096 -I 100 -c || die "fi_pingpong rdm tagged"

# Every test here must run on verbs: a test that finds no verbs device fails
# (FABRIC_REQUIRE), and the skips that the provider's own Info explains are
# logged and summarised (fabric/testkit).
export FABRIC_REQUIRE=verbs
step "conformance suite on verbs"
export FABRIC_SKIP_LOG=/opt/skips-conf.txt
./conformance verbs:: --test-threads=2 > conf.txt 2>&1
st=$?
grep -E "^test |skipped|panicked|^test result" conf.txt
[ $st -eq 0 ] || { cat conf.txt | tail -80; die "conformance suite"; }
sh ./skips.sh "$FABRIC_SKIP_LOG" "conformance on verbs"

step "the data path allocates nothing once warm (eager sizes)"
export FABRIC_SKIP_LOG=/opt/skips-na.txt
./no_alloc verbs_ --test-threads=1 > na.txt 2>&1
st=$?
grep -E "^test |skipped|panicked|allocations|^test result" na.txt
[ $st -eq 0 ] || { cat na.txt | tail -40; die "allocation test"; }
[ -s "$FABRIC_SKIP_LOG" ] && { cat "$FABRIC_SKIP_LOG"; die "allocation test skipped"; }

step "teardown under automatic progress on verbs"
export FABRIC_SKIP_LOG=/opt/skips-td.txt
./auto_teardown verbs_ --test-threads=1 > td.txt 2>&1
st=$?
grep -E "^test |skipped|panicked|^test result" td.txt
[ $st -eq 0 ] || { cat td.txt | tail -40; die "teardown under automatic progress"; }
grep -q "^test result: ok. 1 passed" td.txt || die "the teardown test did not run"

step "async_echo over verbs: one tokio task serving 4 client processes (examples/async_echo_check.sh)"
sh ./async_echo_check.sh ./async_echo verbs 4 300 || die "async_echo over verbs"

step "conformance suite on verbs, RDM connections with their own buffers (FI_VERBS_USE_SRQ=0)"
export FABRIC_SKIP_LOG=/opt/skips-conf-nosrq.txt
FI_VERBS_USE_SRQ=0 ./conformance verbs:: --test-threads=2 > conf.txt 2>&1
st=$?
grep -E "^test result" conf.txt
[ $st -eq 0 ] || { cat conf.txt | tail -80; die "conformance suite without a shared receive queue"; }
sh ./skips.sh "$FABRIC_SKIP_LOG" "conformance on verbs, no SRQ"
unset FABRIC_REQUIRE FABRIC_SKIP_LOG

# libfabric's own tools, by their path: /opt, where ours are, comes first on
# the guest's PATH, so a bare fi_pingpong would be ours.
LF_INFO=/usr/bin/fi_info
LF_PINGPONG=/usr/bin/fi_pingpong
if [ -x "$LF_PINGPONG" ] && [ -x "$LF_INFO" ]; then
    # libfabric's own programs, unchanged, over our libfabric.so.1 (fabric/capi).
    step "Debian's fi_info and fi_pingpong over our libfabric.so.1 (-p verbs, msg and rdm, -S all -c)"
    LD_LIBRARY_PATH=/opt/capi $LF_INFO -p verbs > capi-info.txt 2>&1 || { cat capi-info.txt; die "fi_info over our libfabric.so.1"; }
    grep -Eq "no version information|version .* not found" capi-info.txt && { cat capi-info.txt; die "the dynamic linker complained"; }
    grep -E "provider:|type:" capi-info.txt | sort | uniq -c
    LD_LIBRARY_PATH=/opt/capi $LF_INFO -p verbs -t FI_EP_RDM -v 2>&1 | grep -E "prov_name|protocol:|type:" | head -6
    grep -q FI_EP_RDM capi-info.txt || { cat capi-info.txt; die "fi_info over ours lists no RDM endpoint"; }
    grep -q "verbs;ofi_rxm" capi-info.txt || { cat capi-info.txt; die "fi_info over ours does not name the RDM entry verbs;ofi_rxm"; }
    # Which library the tool mapped: ours.
    LD_LIBRARY_PATH=/opt/capi LD_TRACE_LOADED_OBJECTS=1 $LF_PINGPONG | grep -q "/opt/capi/libfabric.so.1" || die "fi_pingpong does not map /opt/capi/libfabric.so.1"
    export LD_LIBRARY_PATH=/opt/capi
    pp $LF_PINGPONG msg -S all -I 20 -c || die "Debian's fi_pingpong -e msg over our libfabric.so.1"
    pp $LF_PINGPONG rdm -S all -I 20 -c || die "Debian's fi_pingpong -e rdm over our libfabric.so.1"
    pp $LF_PINGPONG rdm -m tagged -S 4096 -I 100 -c || die "Debian's fi_pingpong -e rdm -m tagged over our libfabric.so.1"
    unset LD_LIBRARY_PATH

    step "ours vs libfabric: fi_pingpong -p verbs -e rdm and -e msg, usec/xfer (5 alternating runs each: median, best)"
    # libfabric's rxm sizes its CQ by FI_UNIVERSE_SIZE (256 by default), past
    # rxe's 32767 entries; 64 peers is plenty here.
    export FI_UNIVERSE_SIZE=64
    # The data row: its size column reads 64, 4k, 1m (both tools print it so).
    usec() { awk '$1 ~ /^[0-9.]+[kmg]?$/ && NF >= 8 { v = $7 } END { print v }' cli.txt; }
    # stats FILE: "median best" of the numbers in FILE (one per line).
    stats() { sort -n "$1" | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)], v[1] }'; }
    # side_by_side TAG EP SIZE ITERS: five alternating runs of ours and
    # libfabric's fi_pingpong -e EP, and a "TAG size SIZE" line with the ratios
    # of the medians and of the best runs (a failed libfabric run is noted).
    side_by_side() {
        tag=$1 ep=$2 s=$3 it=$4
        : > ours.txt; : > lf.txt
        for r in 1 2 3 4 5; do
            pp ./fi_pingpong $ep -S $s -I $it > pp.txt || { cat pp.txt; die "$tag: ours failed at $s"; }
            v=$(usec); [ -z "$v" ] || echo "$v" >> ours.txt
            if pp $LF_PINGPONG $ep -S $s -I $it > /dev/null; then
                v=$(usec); [ -z "$v" ] || echo "$v" >> lf.txt
            else
                echo "$tag size $s: libfabric failed in run $r (not a failure of ours)"
            fi
        done
        o=$(stats ours.txt); l=$(stats lf.txt)
        echo "$tag size $s: ours $(tr '\n' ' ' < ours.txt)| libfabric $(tr '\n' ' ' < lf.txt)"
        if [ -z "$o" ] || [ -z "$l" ]; then
            echo "$tag size $s: no figures read (ours '$o', libfabric '$l')"
            return 0
        fi
        echo "$o $l" | awk -v t="$tag" -v s=$s '{ printf "%s size %-8s median ours %10.2f libfabric %10.2f ratio %.2f | best ours %10.2f libfabric %10.2f ratio %.2f\n", t, s, $1, $3, $1 / $3, $2, $4, $2 / $4 }'
    }
    for s in 64 4096 1048576; do
        case $s in 64) it=2000 ;; 4096) it=1000 ;; *) it=50 ;; esac
        side_by_side VERBS-RATIO rdm $s $it
    done
    # MSG endpoints over rxe0 too (no rxm on libfabric's side: its verbs
    # provider posts the application's buffers directly, as ours does on the
    # direct path, the default: ep/direct.rs).
    for s in 64 4096 65536; do
        case $s in 64) it=1000 ;; 4096) it=500 ;; *) it=100 ;; esac
        side_by_side "VERBS-RATIO msg" msg $s $it
    done
    # Ours on the RDM engine's protocol (libfabric ignores the variable).
    export FI_VERBS_MSG_DIRECT=0
    for s in 64 4096 65536; do
        case $s in 64) it=1000 ;; 4096) it=500 ;; *) it=100 ;; esac
        side_by_side "VERBS-RATIO msg-engine" msg $s $it
    done
    unset FI_VERBS_MSG_DIRECT
else
    echo "libfabric's fi_pingpong is not installed: no comparison"
fi

step "FI_VERBS_GID_IDX: the QPs' source GID is the one the domain chose"
# The GID table index of the IPv4 address whose last two bytes are $1 (hex).
gid_of() {
    for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do
        case "$(cat "$f" 2>/dev/null)" in *":ffff:$1") basename "$f"; return ;; esac
    done
}
# qp_gid WANT CM FILE...: every file logs a QP with source GID index WANT, the
# connection manager having proposed CM.
qp_gid() {
    want=$1; cm=$2; shift 2
    for f in "$@"; do
        grep "GID index" "$f" | head -2
        grep -q "GID index $want (the connection manager's: $cm)" "$f" || { cat "$f"; die "$f: no QP with GID index $want (CM: $cm)"; }
    done
}
i15=$(gid_of 0a00:020f)
[ -n "$i15" ] || { grep . /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null; die "no GID of 10.0.2.15"; }
export FI_LOG_LEVEL=info
pp ./fi_pingpong msg -S 64 -I 10 -c > /dev/null || die "fi_pingpong msg at the default GID"
qp_gid "$i15" "$i15" cli.txt srv.txt
# A second address (so a second RoCE v2 GID) on eth0, chosen by FI_VERBS_GID_IDX.
ip addr add 10.0.2.16/24 dev eth0 || die "cannot add a second address"
# The kernel adds the address's GID shortly after (give an emulated CPU 20 s).
i16=
for t in $(seq 1 40); do
    i16=$(gid_of 0a00:0210)
    [ -n "$i16" ] && break
    sleep 0.5
done
sleep 1
[ -n "$i16" ] || { grep . /sys/class/infiniband/rxe0/ports/1/gids/* 2>/dev/null; die "no GID of 10.0.2.16"; }
echo "GID table: 10.0.2.15 at $i15, 10.0.2.16 at $i16"
export FI_VERBS_GID_IDX=$i16
addr=10.0.2.16
pp ./fi_pingpong rdm -S 64 -I 10 -c > /dev/null || die "fi_pingpong rdm with FI_VERBS_GID_IDX=$i16"
qp_gid "$i16" "$i16" cli.txt srv.txt
# rxe has shared receive queues: every connection of an RDM endpoint receives
# through its endpoint's.
grep -q "shared receive queue" srv.txt || { cat srv.txt; die "the RDM endpoint has no shared receive queue"; }
addr=10.0.2.15
ip addr del 10.0.2.16/24 dev eth0 || die "cannot remove the second address"
for t in $(seq 1 40); do
    [ -z "$(gid_of 0a00:0210)" ] && break
    sleep 0.5
done
# GID 0 is the link-local fe80:: one, on no address the domain can offer: the
# domain keeps 10.0.2.15, which the connection manager's GID ($i15) goes with,
# and the QPs are asked for GID 0 all the same. A kernel refuses a source GID of
# another IP family than the route's (EINVAL): then the accept fails, the
# client hears "connection refused", and nobody hangs.
export FI_VERBS_GID_IDX=0
./fi_pingpong -p verbs -e msg -S 64 -I 5 > srv.txt 2>&1 &
spid=$!
sleep 1
timeout 60 ./fi_pingpong -p verbs -e msg -S 64 -I 5 $addr > cli.txt 2>&1
st=$?
sleep 1
kill $spid 2>/dev/null
wait $spid 2>/dev/null
grep -h "GID index\|error" cli.txt srv.txt
[ $st -ne 124 ] || die "fi_pingpong hung with FI_VERBS_GID_IDX=0"
if grep -q "GID index 0 (the connection manager's: $i15)" srv.txt; then
    echo "the QPs use GID 0 where the connection manager chose $i15 (client exit status $st)"
elif grep -q "cannot move it to RTS (GID index 0," srv.txt && grep -q "Connection refused" cli.txt; then
    echo "the kernel refused GID 0 with an IPv4 route; the connection was refused cleanly"
else
    cat cli.txt srv.txt; die "FI_VERBS_GID_IDX=0 did not reach the QP"
fi
unset FI_VERBS_GID_IDX FI_LOG_LEVEL

# ---- Soft-iWARP: siw0 on its own interface (siw-eth, 10.0.3.15; run-guest.sh
# --siw), so the connection manager binds its connections to siw0.
export FI_VERBS_DEVICE_NAME=siw0
addr=10.0.3.15
step "Soft-iWARP: fi_pingpong -p verbs -e msg and -e rdm over siw0, -S all -c"
pp ./fi_pingpong msg -S all -I 20 -c || die "fi_pingpong msg over siw0"
pp ./fi_pingpong rdm -S all -I 20 -c || die "fi_pingpong rdm over siw0"
pp ./fi_pingpong rdm -m tagged -S 4096 -I 100 -c || die "fi_pingpong rdm tagged over siw0"
# MPA's rule: the active side sends first, the passive side waits for it.
export FI_LOG_LEVEL=debug
pp ./fi_pingpong msg -S 64 -I 10 -c > /dev/null || die "fi_pingpong msg over siw0 (debug)"
unset FI_LOG_LEVEL
grep "first message" cli.txt srv.txt
grep -q "sending the first message (iWARP, active side)" cli.txt || die "the active side sent no first message"
grep -q "the active side's first message arrived (iWARP)" srv.txt || die "the passive side saw no first message"
# iWARP's connection manager hands out ports blind to TCP's, and the device
# binds a TCP socket to each: a port a TCP socket holds fails with EADDRINUSE
# (it failed a CI run's RDM endpoint once). Narrow the port range to six
# ports, two of them held by TCP listeners: every endpoint still listens
# and every connection is made, on other ports, and the log shows both retries.
step "Soft-iWARP: ports TCP holds are passed over (listening and connecting)"
range=$(cat /proc/sys/net/ipv4/ip_local_port_range)
nc -l -p 40000 > /dev/null 2>&1 & h1=$!
nc -l -p 40001 > /dev/null 2>&1 & h2=$!
sleep 0.5
echo "40000 40005" > /proc/sys/net/ipv4/ip_local_port_range
export FI_LOG_LEVEL=info FI_LOG_SUBSYS=ep_ctrl
# The connection manager picks a port at random, so a run hits a held port
# by chance (about one in three for each side): runs go on until both sides
# have retried, at least 4 and at most 24 (all 24 missing is about 1 in 10^4).
lr=0 cr=0 i=0
while [ $i -lt 4 ] || { [ $i -lt 24 ] && { [ $lr -eq 0 ] || [ $cr -eq 0 ]; }; }; do
    i=$((i + 1))
    ./async_echo server --provider verbs --clients 1 > ae-s.out 2> ae-s.err & sp=$!
    a=
    for t in $(seq 1 50); do a=$(sed -n 's/^listening //p' ae-s.out); [ -n "$a" ] && break; sleep 0.1; done
    [ -n "$a" ] || { cat ae-s.err; die "run $i: the async_echo server did not listen"; }
    timeout 60 ./async_echo client "$a" --provider verbs --rounds 10 --size 64 > ae-c.out 2> ae-c.err \
        || { tail -5 ae-c.err; die "run $i: the client failed"; }
    wait $sp || { tail -5 ae-s.err; die "run $i: the server failed"; }
    l=$(cat ae-s.err ae-c.err | grep -c "listening at .*: trying another port"); c=$(grep -c "TCP holds port" ae-c.err)
    echo "run $i: server at ${a##*/}, listening retried $l times, connecting $c times"
    lr=$((lr + l)); cr=$((cr + c))
done
unset FI_LOG_LEVEL FI_LOG_SUBSYS
echo "$range" > /proc/sys/net/ipv4/ip_local_port_range
kill $h1 $h2 2>/dev/null
[ $lr -gt 0 ] && [ $cr -gt 0 ] || die "no retry seen in $i runs (listening $lr, connecting $cr)"
if [ -x "$LF_PINGPONG" ]; then
    step "Soft-iWARP: Debian's fi_pingpong over our libfabric.so.1 (msg and rdm, -S all -c)"
    export LD_LIBRARY_PATH=/opt/capi
    pp $LF_PINGPONG msg -S all -I 20 -c || die "Debian's fi_pingpong -e msg over our libfabric.so.1 on siw0"
    pp $LF_PINGPONG rdm -S all -I 20 -c || die "Debian's fi_pingpong -e rdm over our libfabric.so.1 on siw0"
    unset LD_LIBRARY_PATH
    step "Soft-iWARP: ours vs libfabric 1.17's verbs over siw0, fi_pingpong 64 B and 64 KiB (5 alternating runs: median, best)"
    for ep in msg rdm; do
        side_by_side "SIW-RATIO $ep" $ep 64 500
        side_by_side "SIW-RATIO $ep" $ep 65536 100
    done
fi

# The conformance suite over siw0, a gate: iWARP's flow control (receive
# credits), its refused accesses (a READ behind each RDM write) and its remote
# CQ data (a SEND after the write) are the provider's (README.md, "Soft-iWARP").
# Bounded (300 s), so a hung test cannot hold the run; the counts and each
# failure's first lines are printed before the run fails.
step "Soft-iWARP: conformance suite on siw0"
export FABRIC_REQUIRE=verbs FABRIC_SKIP_LOG=/opt/skips-siw.txt
timeout 300 ./conformance verbs:: --test-threads=2 > conf-siw.txt 2>&1
st=$?
echo "exit status $st"
grep -E "^test result" conf-siw.txt || echo "the suite did not finish within 300 s"
for t in $(grep -E '^test .* FAILED$' conf-siw.txt | awk '{ print $2 }'); do
    echo "failed: $t: $(grep -A4 "^---- $t stdout ----" conf-siw.txt | grep -v '^----' | grep -v '^$' | grep -v '^thread' | head -1 | cut -c1-200)"
done
passed=$(grep -c ' \.\.\. ok$' conf-siw.txt); failed=$(grep -c ' \.\.\. FAILED$' conf-siw.txt)
echo "SIW-CONFORMANCE passed $passed, failed $failed"
# A failed test gets one more run alone, when the suite finished and at most two
# failed; each is named as it passes ("SIW-CONFORMANCE intermittent") or fails
# again. Kept for the one intermittent failure seen when siw first ran here
# (about one suite run in ten: a valid small RDM write completed with
# IBV_WC_GENERAL_ERR); later code has not shown it: 31 of 31 suite runs in one
# guest passed, besides every CI run since.
if [ $st -ne 0 ] && grep -qE "^test result" conf-siw.txt && [ "$failed" -le 2 ] && [ "$failed" -ge 1 ]; then
    st=0
    for t in $(grep -E '^test .* FAILED$' conf-siw.txt | awk '{ print $2 }'); do
        if timeout 120 ./conformance "$t" --exact > conf-retry.txt 2>&1; then
            echo "SIW-CONFORMANCE intermittent: $t failed, then passed when run again"
        else
            cat conf-retry.txt; echo "SIW-CONFORMANCE $t failed twice"; st=1
        fi
    done
fi
[ $st -eq 0 ] || { tail -80 conf-siw.txt; die "conformance suite on siw0"; }
sh ./skips.sh "$FABRIC_SKIP_LOG" "conformance on siw0"
unset FABRIC_REQUIRE FABRIC_SKIP_LOG
export FI_VERBS_DEVICE_NAME=rxe0
addr=10.0.2.15
echo "VERBS-CI PASS"
EOF

# add_step DIR: the guest runs $stage/DIR/step.sh just before its final PASS
# line (the steps below, each in a directory of its own, in this order).
add_step() {
    awk -v step=". ./$1/step.sh" '$0 == "echo \"VERBS-CI PASS\"" { print step } { print }' \
        "$stage/test.sh" > "$stage/test.sh.new" && mv "$stage/test.sh.new" "$stage/test.sh"
    grep -qxF ". ./$1/step.sh" "$stage/test.sh" || { echo "ci.sh: cannot add the $1 step" >&2; exit 1; }
}

# ---- perftest's command lines: Debian's perftest (ib_*, put in the guest by
# run-guest.sh when installed) and fabric's fi_send_lat & co. run the same
# command lines over Soft-RoCE through fi-tools/perftest-compare.sh, which
# prints both tables and reads both with one perftest-style parser. The step
# runs just before the final PASS line; without perftest, fabric's tools alone.
mkdir -p "$stage/perftest"
for t in send_lat send_bw write_lat write_bw read_lat read_bw atomic_lat atomic_bw; do
    b=$(bin "$tools" "fi_$t")
    [ -x "$b" ] || { echo "ci.sh: the build did not produce fi_$t" >&2; exit 1; }
    cp "$b" "$stage/perftest/"
done
cp fi-tools/perftest-compare.sh "$stage/perftest/"
cat > "$stage/perftest/step.sh" <<'EOF'
step "perftest's command lines: Debian's perftest and fabric's fi_* tools over rxe0 (-R: rdma_cm, MSG endpoints)"
if command -v ib_send_lat > /dev/null; then only=""; else echo "perftest is not installed: fabric's tools alone"; only=--only-ours; fi
sh ./perftest/perftest-compare.sh $only --ours /opt/perftest --provider verbs --addr $addr --timeout 300 \
    'send_lat -R -d rxe0 -n 1000' 'send_bw -R -d rxe0 -n 1000' 'write_lat -R -d rxe0 -n 1000' \
    'write_bw -R -d rxe0 -n 1000' 'read_lat -R -d rxe0 -n 1000' 'read_bw -R -d rxe0 -n 1000' \
    'atomic_lat -R -d rxe0 -n 1000' 'atomic_bw -R -d rxe0 -n 1000' 'send_lat -R -d rxe0 -a -n 100' \
    'send_bw -R -d rxe0 -n 1000 --report_gbits' 'send_lat -R -d rxe0 -n 1000 --output=latency' \
    'send_lat -R -d rxe0 -D 2' 'write_bw -R -d rxe0 -D 2' \
    'send_bw -b -R -d rxe0 -n 1000' 'write_bw -b -R -d rxe0 -n 1000' 'read_bw -b -R -d rxe0 -n 1000' \
    'atomic_bw -b -R -d rxe0 -n 1000' 'send_bw -b -R -d rxe0 -n 1000 --report-both' \
    > perftest.txt 2>&1
st=$?
cat perftest.txt
[ $st -eq 0 ] || die "perftest comparison"
EOF
add_step perftest
# ---- end of perftest's command lines

# ---- fi_perf's eight tests (send, write, read, atomic; bw and lat) over
# Soft-iWARP, MSG and RDM endpoints, each run to completion by server and
# client (siw has no atomics: MSG and RDM emulate them). Runs before the final
# PASS.
mkdir -p "$stage/fiperf"
b=$(bin "$tools" fi_perf)
[ -x "$b" ] || { echo "ci.sh: the build did not produce fi_perf" >&2; exit 1; }
cp "$b" "$stage/fiperf/"
cat > "$stage/fiperf/step.sh" <<'EOF'
step "Soft-iWARP: fi_perf's tests over siw0 (send, write, read, atomic; bw and lat; msg and rdm)"
export FI_VERBS_DEVICE_NAME=siw0
addr=10.0.3.15
# perf_once TEST EP: one run of fi_perf TEST (two words) over siw0; its status.
perf_once() {
    # shellcheck disable=SC2086 # the test is two words
    ./fiperf/fi_perf $1 -p verbs -e $2 -I 100 --timeout 60 > perf-s.txt 2>&1 &
    sp=$!
    sleep 1
    st=0; timeout 300 ./fiperf/fi_perf $1 -p verbs -e $2 -I 100 --timeout 60 $addr > perf-c.txt 2>&1 || st=$?
    sw=0; wait $sp || sw=$?
    [ $st -eq 0 ] && [ $sw -eq 0 ]
}
# Any failure fails the step. (A stall of "send bw -e rdm", once retried here,
# was fi_perf's server waiting on the control connection without driving
# progress while its answers to the client's last sends waited for credits in
# the provider; both sides now drive progress until the end of a size.)
for ep in msg rdm; do
    for t in "send lat" "send bw" "write lat" "write bw" "read lat" "read bw" "atomic lat" "atomic bw"; do
        if ! perf_once "$t" $ep; then
            cat perf-c.txt; echo "-- server:"; cat perf-s.txt; die "fi_perf $t -e $ep over siw0"
        fi
        echo "fi_perf $t -e $ep over siw0: $(grep -E '^ *[0-9]' perf-c.txt | tail -1 | tr -s ' ')"
    done
done
export FI_VERBS_DEVICE_NAME=rxe0
addr=10.0.2.15
EOF
add_step fiperf
# ---- end of fi_perf over siw0

# ---- Which tests each library passes over Soft-iWARP: the same programs
# (Debian's fi_pingpong; examples/c/hello_libfabric.c and the in-process RDM
# round trip of ../shared/tools/inproc, both compiled here against Debian's
# libfabric-dev) run over libfabric 1.17's libfabric.so.1 and over ours
# (LD_LIBRARY_PATH), on siw0. A SIW-MATRIX line per test; ours must pass every
# one, libfabric's results are reported. Runs before the final PASS.
mkdir -p "$stage/matrix"
if [ -f /usr/include/rdma/fabric.h ]; then
    cc -O2 -o "$stage/matrix/hello_libfabric" examples/c/hello_libfabric.c -lfabric ||
        { echo "ci.sh: cannot compile hello_libfabric.c" >&2; exit 1; }
    inproc_src="$root/../shared/tools/inproc/lf_inproc.c"
    if [ -f "$inproc_src" ]; then
        cc -O2 -o "$stage/matrix/lf_inproc" "$inproc_src" -lfabric ||
            { echo "ci.sh: cannot compile $inproc_src" >&2; exit 1; }
    else
        echo "ci.sh: $inproc_src is absent (../shared beside the checkout): the matrix runs without it"
    fi
fi
cat > "$stage/matrix/step.sh" <<'EOF'
step "Soft-iWARP: which tests each library passes (the same programs over libfabric 1.17's libfabric.so.1 and over ours)"
if [ -x "$LF_PINGPONG" ] && [ -x ./matrix/hello_libfabric ]; then
    export FI_VERBS_DEVICE_NAME=siw0
    addr=10.0.3.15
    # cell [--report] TEST COMMAND...: run COMMAND over each library; a
    # SIW-MATRIX line. A failure of ours fails the run, unless --report.
    cell() {
        gate=1; [ "$1" = --report ] && { gate=0; shift; }
        name=$1; shift
        line="SIW-MATRIX $(printf '%-34s' "$name")"
        for lib in libfabric ours; do
            if [ $lib = ours ]; then export LD_LIBRARY_PATH=/opt/capi; else unset LD_LIBRARY_PATH; fi
            st=0; "$@" > matrix.txt 2>&1 || st=$?
            if [ $st -eq 0 ]; then r=pass; else r=FAIL; fi
            unset LD_LIBRARY_PATH
            [ $r = pass ] || echo "$name over $lib: exit $st$([ $st = 124 ] && echo ' (timed out)'), last line: $(tail -n 1 matrix.txt)"
            [ $lib = libfabric ] && line="$line | libfabric 1.17: $r" || line="$line | fabric: $r"
            if [ $lib = ours ] && [ $r = FAIL ] && [ $gate = 1 ]; then
                cat matrix.txt; echo "$line"; die "$name over our libfabric.so.1 on siw0"
            fi
        done
        echo "$line"
    }
    cell "fi_pingpong -e msg -S all -c" pp $LF_PINGPONG msg -S all -I 20 -c
    cell "fi_pingpong -e rdm -S all -c" pp $LF_PINGPONG rdm -S all -I 20 -c
    cell "fi_pingpong -e rdm -S 1048576 -I 20 -c" pp $LF_PINGPONG rdm -S 1048576 -I 20 -c
    cell "hello_libfabric (RDM to itself)" timeout 60 ./matrix/hello_libfabric verbs $addr
    # lf_inproc asks for node 127.0.0.1 with FI_SOURCE: no RDMA port has a
    # loopback address, and ours answers FI_ENODATA (libfabric 1.17 lets
    # librdmacm bind it to a device); reported, not a gate.
    if [ -x ./matrix/lf_inproc ]; then
        cell --report "lf_inproc (two RDM endpoints, tagged)" timeout 120 ./matrix/lf_inproc verbs 1000 64
    fi
    export FI_VERBS_DEVICE_NAME=rxe0
    addr=10.0.2.15
else
    echo "libfabric's fi_pingpong or its headers are not installed: no matrix"
fi
EOF
add_step matrix
# ---- end of the matrix

"$here/run-guest.sh" --siw --timeout "$timeout" "${keep[@]}" --script "$stage/test.sh" \
    "$stage/fi_info" "$stage/fi_pingpong" "$stage/conformance" "$stage/no_alloc" "$stage/auto_teardown" \
    "$stage/skips.sh" "$stage/capi" "$stage/perftest" "$stage/fiperf" "$stage/matrix" "$stage/async_echo" "$stage/async_echo_check.sh"
