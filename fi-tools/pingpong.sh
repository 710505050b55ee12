#!/usr/bin/env bash
# The main job: a complete ping-pong over the default provider on this machine,
# server and client both started here, printing libfabric's table.
#   fi-tools/pingpong.sh                 # tcp, rdm, sizes 64 B to 1 MiB
#   fi-tools/pingpong.sh -e msg -S 4096  # any fi_pingpong option (both sides)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p fi-tools
bin=target/release/fi_pingpong
args=("$@")
if [ ${#args[@]} -eq 0 ]; then args=(-p tcp -e rdm -I 1000); fi
"$bin" "${args[@]}" >/dev/null &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
"$bin" "${args[@]}" 127.0.0.1
wait $server
trap - EXIT
