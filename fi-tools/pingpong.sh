#!/usr/bin/env bash
# The main job: a complete ping-pong over the default provider on this machine,
# server and client both started here, printing libfabric's table.
#   fi-tools/pingpong.sh                 # tcp, rdm, sizes 64 B to 1 MiB
#   fi-tools/pingpong.sh -e msg -S 4096  # any fi_pingpong option (both sides)
# It runs the fi_pingpong it has just built (wherever cargo puts it), on a free
# control port of its own unless -B/-P name one, and shows the server's errors
# when a side fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(fi-tools/built.sh build --release -q -p fi-tools | awk '$1 == "fi_pingpong" { print $2 }' | tail -1)
[ -x "$bin" ] || { echo "pingpong.sh: the build produced no fi_pingpong" >&2; exit 1; }
args=("$@")
if [ ${#args[@]} -eq 0 ]; then args=(-p tcp -e rdm -I 1000); fi

# A control port nobody listens on (another run on this machine, say), unless the
# caller chose one: the client connects to the server's -B port.
# shellcheck source=fi-tools/control-port.sh
. fi-tools/control-port.sh
ports=()
case " ${args[*]} " in
    *" -B "* | *" -P "*) ;;
    *) ports=(-B "$(control_port)") ;;
esac

log=$(mktemp)
server=
cleanup() {
    [ -n "$server" ] && kill "$server" 2>/dev/null || true
    rm -f "$log"
}
trap cleanup EXIT
"$bin" "${args[@]}" "${ports[@]}" >/dev/null 2>"$log" &
server=$!
status=0
"$bin" "${args[@]}" "${ports[@]}" 127.0.0.1 || status=$?
if [ $status -eq 0 ]; then
    wait "$server" || status=$?
    [ $status -eq 0 ] || echo "pingpong.sh: the server failed (exit $status):" >&2
else
    # Give the server a moment to report its side, then stop it.
    sleep 0.5
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    echo "pingpong.sh: the client failed (exit $status); the server said:" >&2
fi
server=
if [ $status -ne 0 ]; then
    sed 's/^/  server: /' "$log" >&2
fi
exit $status
