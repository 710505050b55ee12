#!/usr/bin/env bash
# Side by side: our fi_pingpong and libfabric's (Debian package libfabric-bin), run
# alternately on loopback, median of N runs each, then the ratio ours/libfabric of
# usec/xfer (lower is better; ANCHORS.md sets the goals).
#   benches/compare.sh                      # tcp msg and rdm, 64 B 4 KiB 64 KiB 1 MiB
#   RUNS=5 benches/compare.sh tcp rdm 64    # one case
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
command -v fi_pingpong >/dev/null || { echo "libfabric's fi_pingpong is missing: apt-get install libfabric-bin" >&2; exit 1; }
cargo build --release -q -p fi-tools
ours=$PWD/target/release/fi_pingpong
theirs=$(command -v fi_pingpong)

iters() { if [ "$1" -ge 65536 ]; then echo 2000; else echo 20000; fi; }

# One run: prints usec/xfer (the 7th column of the data row).
one() { # bin prov ep size
  local bin=$1 prov=$2 ep=$3 size=$4 port=$((20000 + RANDOM % 20000))
  local it; it=$(iters "$size")
  "$bin" -p "$prov" -e "$ep" -I "$it" -S "$size" -B "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  local out
  out=$(timeout 120 "$bin" -p "$prov" -e "$ep" -I "$it" -S "$size" -P "$port" 127.0.0.1 2>/dev/null || true)
  wait $srv 2>/dev/null || true
  echo "$out" | awk '$1 ~ /^[0-9]+[kmg]?$/ && NF >= 8 { print $7 }' | tail -1
}

median() { sort -g | awk '{a[NR]=$1} END { if (NR==0) print "nan"; else print a[int((NR+1)/2)] }'; }

cases=()
if [ $# -ge 3 ]; then cases=("$1 $2 $3"); else
  for ep in msg rdm; do for s in 64 4096 65536 1048576; do cases+=("tcp $ep $s"); done; done
fi
printf '%-6s %-5s %9s %14s %14s %8s\n' prov ep bytes "ours us/xfer" "libfabric" ratio
for c in "${cases[@]}"; do
  set -- $c
  o=(); t=()
  for _ in $(seq "$RUNS"); do
    o+=("$(one "$ours" "$1" "$2" "$3")")
    t+=("$(one "$theirs" "$1" "$2" "$3")")
  done
  om=$(printf '%s\n' "${o[@]}" | median)
  tm=$(printf '%s\n' "${t[@]}" | median)
  ratio=$(awk -v a="$om" -v b="$tm" 'BEGIN { if (b+0 > 0 && a+0 > 0) printf "%.2f", a/b; else print "n/a" }')
  printf '%-6s %-5s %9s %14s %14s %8s\n' "$1" "$2" "$3" "$om" "$tm" "$ratio"
done
