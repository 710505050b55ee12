#!/usr/bin/env bash
# Self-test of the guest harness with stock tools only (no code of ours):
# boots the guest through run-guest.sh and checks that rxe0 is PORT_ACTIVE,
# that ibv_rc_pingpong runs over it, and that libfabric's verbs provider
# (fi_info, fi_pingpong over an RDM endpoint) works there.
# Usage: selftest.sh [run-guest.sh options, e.g. --timeout SECS --keep DIR]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/guest-selftest.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The script run inside the guest (busybox sh, cwd /opt).
cat >"$tmp/selftest-guest.sh" <<'EOF'
fail() { echo "selftest: FAIL: $*"; exit 1; }
ADDR=10.0.2.15

# Run "$@" as a server in the background, then the client (retried while
# the server is not listening yet); both are bounded by timeout.
pingpong() {
    name=$1; shift
    timeout 120 "$@" >"/tmp/$name-server.log" 2>&1 &
    spid=$!
    sleep 1
    ok=0
    for try in 1 2 3 4 5; do
        if timeout 120 "$@" "$ADDR" >"/tmp/$name-client.log" 2>&1; then
            ok=1; break
        fi
        echo "selftest: $name client attempt $try failed:"; cat "/tmp/$name-client.log"
        sleep 2
    done
    wait "$spid"; sst=$?
    echo "--- $name server:"; cat "/tmp/$name-server.log"
    echo "--- $name client:"; cat "/tmp/$name-client.log"
    [ "$ok" = 1 ] || fail "$name client failed"
    [ "$sst" = 0 ] || fail "$name server exited with $sst"
    echo "selftest: $name OK"
}

echo "=== ibv_devinfo"
ibv_devinfo >/tmp/devinfo.log 2>&1 || { cat /tmp/devinfo.log; fail "ibv_devinfo failed"; }
cat /tmp/devinfo.log
grep -q 'hca_id:[[:space:]]*rxe0' /tmp/devinfo.log || fail "no rxe0 in ibv_devinfo"
grep -q PORT_ACTIVE /tmp/devinfo.log || fail "rxe0 port not PORT_ACTIVE"
echo "selftest: ibv_devinfo OK"

echo "=== ibv_rc_pingpong"
pingpong ibv_rc_pingpong ibv_rc_pingpong -g 1 -d rxe0

echo "=== fi_info -p verbs"
fi_info -p verbs >/tmp/fi_info.log 2>&1 || { cat /tmp/fi_info.log; fail "fi_info -p verbs failed"; }
grep 'provider:\|domain:\|type:' /tmp/fi_info.log | sort | uniq -c
grep -q 'provider: verbs' /tmp/fi_info.log || fail "fi_info lists no verbs provider"
echo "selftest: fi_info OK"

# verbs;ofi_rxm sizes its MSG CQ as (msg tx + rx size) * FI_UNIVERSE_SIZE =
# (128 + 128) * 256 = 65536 entries by default, above rxe's max_cqe of 32767:
# ibv_create_cq fails and fi_enable returns -22.  A smaller universe fits.
echo "=== fi_pingpong -p verbs -e rdm (FI_UNIVERSE_SIZE=64)"
pingpong fi_pingpong env FI_UNIVERSE_SIZE=64 fi_pingpong -p verbs -e rdm -S 64 -I 100

echo "selftest: all checks passed"
EOF

"$here/run-guest.sh" "$@" --script "$tmp/selftest-guest.sh"
