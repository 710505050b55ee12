#!/usr/bin/env bash
# Instructions per in-process round trip (../shared/tools/inproc: one thread, A sends
# SIZE bytes tagged to B, B answers, every completion read), counted by callgrind,
# which does not drift on a noisy machine, for each provider:
#   ours, C ABI   libfabric's own lf_inproc.c, compiled here, over our libfabric.so.1
#   ours, Rust    the same round trip through the safe Rust API (fabric-benches' inproc)
#   2.6.0         lf_inproc over libfabric 2.6.0 (../shared/anchors/libfabric-2.6.0, or ANCHOR26)
#   1.17          lf_inproc over Debian's libfabric (libfabric-dev), when installed
# and the ratios ours / 2.6.0 next to issue 18's goals (shm and tcp <= 0.5, udp <= 0.6);
# with udp, also the same round trip over DGRAM endpoints (benches/c/inproc_dgram.c,
# fi_send/fi_recv) through the C ABI against libfabric's udp (goal: at most 1.0).
#   benches/instr.sh                 # shm, tcp and udp at 64 B
#   benches/instr.sh tcp 4096        # one provider, one size
# Needs valgrind and a C compiler; OURLIB=DIR counts a libfabric.so.1 built elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
count=../shared/tools/inproc/instr.sh
[ -x "$count" ] || count=$(cd .. && pwd)/shared/tools/inproc/instr.sh
src=$(dirname "$count")/lf_inproc.c
[ -f "$src" ] || { echo "instr.sh: no ../shared/tools/inproc beside the repository" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "instr.sh: valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
provs=(shm tcp udp)
[ $# -ge 1 ] && provs=("$1")
size=${2:-64}
anchor=${ANCHOR26:-$(cd .. && pwd)/shared/anchors/libfabric-2.6.0}
work=$(mktemp -d)
touch "$work/start"
# lf_inproc never closes its endpoints, so libfabric's shm leaves its regions behind.
trap 'benches/lf-shm-clean.sh "$work/start"; rm -rf "$work"' EXIT

# Our two programs, from this very build (wherever cargo puts it).
rust=$(fi-tools/built.sh build --release -q -p fabric-benches --bin inproc | awk '$1 == "inproc" { print $2 }' | tail -1)
ourlib=${OURLIB:-}
if [ -z "$ourlib" ]; then
  so=$(fi-tools/built.sh build --release -q -p fabric-capi | awk '$1 == "fabric_capi.so" { print $2 }' | tail -1)
  ourlib=$(dirname "$so")
fi
[ -f "$ourlib/libfabric.so.1" ] || { echo "instr.sh: no libfabric.so.1 in $ourlib" >&2; exit 1; }
# lf_inproc against libfabric's headers: Debian's (libfabric-dev) where installed,
# else 2.6.0's own build. The same binary runs over ours and over 1.17.
cc -O2 -o "$work/lf_inproc" "$src" -L"$ourlib" -l:libfabric.so.1
cc -O2 -o "$work/inproc_dgram" benches/c/inproc_dgram.c -L"$ourlib" -l:libfabric.so.1
have117=
[ -e /usr/lib/x86_64-linux-gnu/libfabric.so.1 ] && have117=1

num() { awk '{ for (i = 1; i <= NF; i++) if ($i == "instructions") print $(i - 1) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }
printf '%-5s %6s %10s %10s %10s %10s %10s %10s %6s\n' prov size "C ABI" Rust 2.6.0 1.17 "C/2.6" "Rust/2.6" goal
for p in "${provs[@]}"; do
  c=$(LD_LIBRARY_PATH=$ourlib "$count" "$work/lf_inproc" "$p" "$size" | num)
  r=$("$count" "$rust" "$p" "$size" | num)
  a=n/a
  [ -x "$anchor/bin/lf_inproc" ] && a=$(LD_LIBRARY_PATH=$anchor/lib "$count" "$anchor/bin/lf_inproc" "$p" "$size" | num)
  o=n/a
  [ -n "$have117" ] && o=$(LD_LIBRARY_PATH= "$count" "$work/lf_inproc" "$p" "$size" | num)
  goal=0.50
  [ "$p" = udp ] && goal=0.60
  printf '%-5s %6s %10s %10s %10s %10s %10s %10s %6s\n' "$p" "$size" "$c" "$r" "$a" "$o" "$(ratio "$c" "$a")" "$(ratio "$r" "$a")" "$goal"
done
for p in "${provs[@]}"; do
  [ "$p" = udp ] || continue
  c=$(LD_LIBRARY_PATH=$ourlib "$count" "$work/inproc_dgram" udp "$size" | num)
  a=n/a
  [ -d "$anchor/lib" ] && a=$(LD_LIBRARY_PATH=$anchor/lib "$count" "$work/inproc_dgram" udp "$size" | num)
  o=n/a
  [ -n "$have117" ] && o=$(LD_LIBRARY_PATH= "$count" "$work/inproc_dgram" udp "$size" | num)
  printf '%-5s %6s %10s %10s %10s %10s %10s %10s %6s\n' dgram "$size" "$c" - "$a" "$o" "$(ratio "$c" "$a")" - 1.00
done
