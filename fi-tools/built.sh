#!/usr/bin/env bash
# Build with cargo and print what this very build produced, wherever cargo put it
# (CARGO_TARGET_DIR, a configured target-dir, or ./target): one line per executable,
# "<target name> <path>". Scripts run these paths, never a fixed target/... one, so
# a fresh clone with CARGO_TARGET_DIR set works and a used checkout never runs a
# stale binary.
#   fi-tools/built.sh build --release -p fi-tools          # fi_info, fi_pingpong, ...
#   fi-tools/built.sh test --release -p fabric --no-run    # the test binaries
# Cargo's own messages (errors included) go to standard error; a failed build
# fails this script.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 <build|test> [cargo options]" >&2; exit 2; }
sub=$1
shift
out=$(cargo "$sub" --message-format=json-render-diagnostics "$@")
# Each artifact is one JSON line; a binary's carries its target's name (the
# target object holds no nested braces) and "executable":"<path>" (null for
# libraries). A shared library (cdylib) is listed by its first file ending in
# .so, as "<target name>.so <path>" (fabric-capi: "fabric_capi.so .../libfabric_capi.so",
# beside which its link step leaves libfabric.so.1).
printf '%s\n' "$out" | sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)"[^}]*}.*"executable":"\([^"]*\)".*/\1 \2/p'
printf '%s\n' "$out" | sed -n 's/.*"target":{[^}]*"name":"\([^"]*\)"[^}]*}.*"filenames":\[[^]]*"\([^"]*\.so\)".*/\1.so \2/p'
