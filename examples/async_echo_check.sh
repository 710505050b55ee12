#!/bin/sh
# Run the async echo server and N clients over one provider and check them: each
# client must print "ok <rounds> round trips" and the server "served <N> clients,
# <N*rounds> messages". Written for the verbs provider in the QEMU guest
# (providers/verbs/guest/ci.sh; busybox sh), where `cargo test` does not run;
# elsewhere examples/tests/run.rs does the same.
#   sh examples/async_echo_check.sh <async_echo binary> <provider> [clients] [rounds]
# The binary comes from fi-tools/built.sh (verbs: `fi-tools/built.sh build
# --release -p fabric-examples --features verbs --bin async_echo`).
set -u
[ $# -ge 2 ] || { echo "usage: $0 <async_echo> <provider> [clients] [rounds]" >&2; exit 2; }
bin=$1 prov=$2 n=${3:-4} rounds=${4:-300}
dir=$(mktemp -d) || exit 1
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
fail() {
    echo "async_echo_check ($prov): $*" >&2
    for f in "$dir"/*; do echo "== $f" >&2; cat "$f" >&2; done
    exit 1
}

start=$(date +%s)
timeout 300 "$bin" server --provider "$prov" --clients "$n" > "$dir/server.out" 2> "$dir/server.err" &
server=$!
addr=
for _ in $(seq 1 100); do
    addr=$(sed -n 's/^listening //p' "$dir/server.out" | head -1)
    [ -n "$addr" ] && break
    kill -0 "$server" 2>/dev/null || fail "the server exited before listening"
    sleep 0.1
done
[ -n "$addr" ] || fail "the server printed no address"
pids=
for i in $(seq 1 "$n"); do
    timeout 300 "$bin" client "$addr" --provider "$prov" --rounds "$rounds" --size 8192 \
        > "$dir/client$i.out" 2> "$dir/client$i.err" &
    pids="$pids $!"
done
i=0
for p in $pids; do
    i=$((i + 1))
    wait "$p" || fail "client $i failed"
    [ "$(cat "$dir/client$i.out")" = "ok $rounds round trips" ] || fail "client $i's output"
done
wait "$server" || { server=; fail "the server failed"; }
server=
want="served $n clients, $((n * rounds)) messages"
[ "$(tail -n 1 "$dir/server.out")" = "$want" ] || fail "the server's last line is not \"$want\""
echo "async_echo over $prov: one server task, $n clients x $rounds round trips, every echo checked, $(( $(date +%s) - start )) s"
