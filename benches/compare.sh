#!/usr/bin/env bash
# Side by side: our fi_pingpong and libfabric's (Debian package libfabric-bin), run
# alternately on loopback, N runs each; prints the median and the best (lowest) run
# of each side and the ratios ours/libfabric of usec/xfer (lower is better;
# ANCHORS.md sets the goals). On a shared, noisy machine the best-of-N ratio shows
# what each stack can do; the median shows what a run is likely to see.
#   benches/compare.sh                      # tcp (msg, rdm) and shm (rdm), every size below
#   benches/compare.sh shm                  # one provider: shm rdm, 64 B to 4 MiB
#   benches/compare.sh udp                  # udp dgram 64 B; udp rdm (ours vs udp;ofi_rxd) 64 B, 4 KiB, 1 MiB
#   RUNS=5 benches/compare.sh tcp rdm 64    # one case
#   CAPI=1 benches/compare.sh tcp           # the C ABI: Debian's own fi_pingpong, the same
#                                           # binary, over our libfabric.so.1 vs over libfabric
#   CAPI=1 OURLIB=DIR benches/compare.sh ...  # ... over the libfabric.so.1 in DIR (an earlier build)
# Each case runs ours, Debian's libfabric 1.17 and, where the repository sits beside
# ../shared/anchors/libfabric-2.6.0 (or ANCHOR26 names that directory), libfabric
# 2.6.0's own fi_pingpong over its own library, alternately, and prints both ratios.
#   VS=1.17 benches/compare.sh ...          # only 1.17 (VS=2.6: only 2.6.0)
#   PIN=1 benches/compare.sh tcp msg 65536  # each pingpong's server on CPU 0, client on CPU 1
# (taskset). Unpinned, where the scheduler places the two sides sets some figures
# (tcp at 64 KiB falls near 10 or near 24 us per run, on either stack); pinned,
# every run sees the same placement.
# Where ../shared/tools/limits/rawpp.c is there (or LIMITS names its directory), each
# case also runs the machine's floor alternately with the rest: the raw busy-polling
# socket ping-pong (SPIN=1 rawpp tcp|udp SIZE) for tcp and udp, two processes flipping
# one cache line (rawpp shm) for shm; the `raw` columns give it and ours/raw.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-3}
command -v fi_pingpong >/dev/null || { echo "libfabric's fi_pingpong is missing: apt-get install libfabric-bin" >&2; exit 1; }
theirs=$(command -v fi_pingpong)
# libfabric 2.6.0, built in ../shared (ANCHORS.md): its fi_pingpong and library.
anchor=${ANCHOR26:-$(cd .. && pwd)/shared/anchors/libfabric-2.6.0}
VS=${VS:-both}
case $VS in
  1.17) anchor= ;;
  2.6 | both)
    if [ ! -x "$anchor/bin/fi_pingpong" ]; then
      [ "$VS" = 2.6 ] && { echo "compare.sh: no libfabric 2.6.0 at $anchor (set ANCHOR26)" >&2; exit 1; }
      echo "compare.sh: no libfabric 2.6.0 at $anchor: comparing with 1.17 only" >&2
      anchor=
    fi ;;
  *) echo "compare.sh: VS is 1.17, 2.6 or both" >&2; exit 2 ;;
esac
# "ours": the fi_pingpong this very build produced, wherever cargo put it; with
# CAPI=1, libfabric's own fi_pingpong over the libfabric.so.1 this build produced.
ourlib=
if [ -n "${CAPI:-}" ]; then
  if [ -n "${OURLIB:-}" ]; then
    ourlib=$OURLIB
  else
    so=$(fi-tools/built.sh build --release -q -p fabric-capi | awk '$1 == "fabric_capi.so" { print $2 }' | tail -1)
    ourlib=$(dirname "$so")
  fi
  [ -f "$ourlib/libfabric.so.1" ] || { echo "compare.sh: the build produced no libfabric.so.1" >&2; exit 1; }
  ours=$theirs
else
  ours=$(fi-tools/built.sh build --release -q -p fi-tools | awk '$1 == "fi_pingpong" { print $2 }' | tail -1)
  [ -x "$ours" ] || { echo "compare.sh: the build produced no fi_pingpong" >&2; exit 1; }
fi

# The floor: ../shared/tools/limits/rawpp.c, compiled once into a temporary directory.
limits=${LIMITS:-$(cd .. && pwd)/shared/tools/limits}
rawpp=
rawdir=$(mktemp -d)
touch "$rawdir/start"
# A libfabric fi_pingpong stopped by its timeout leaves its shm regions behind.
trap 'benches/lf-shm-clean.sh "$rawdir/start"; rm -rf "$rawdir"' EXIT
if [ -f "$limits/rawpp.c" ] && command -v cc >/dev/null; then
  cc -O2 -o "$rawdir/rawpp" "$limits/rawpp.c" && rawpp=$rawdir/rawpp
fi

# One run of the floor for a case: usec per half round trip.
raw() { # prov size
  local it; it=$(iters "$2")
  case $1 in
    tcp | udp) SPIN=1 timeout 120 "$rawpp" "$1" "$2" "$it" 2>/dev/null | awk '{ print $4 }' ;;
    shm) timeout 120 "$rawpp" shm 0 $((it * 10)) 2>/dev/null | awk '{ print $3 }' ;;
  esac
}

# PIN=1: the server on CPU 0 and the client on CPU 1.
pin_s=() pin_c=()
if [ -n "${PIN:-}" ]; then
  command -v taskset >/dev/null || { echo "compare.sh: PIN=1 needs taskset (util-linux)" >&2; exit 1; }
  [ "$(nproc)" -ge 2 ] || { echo "compare.sh: PIN=1 needs two CPUs" >&2; exit 1; }
  pin_s=(taskset -c 0) pin_c=(taskset -c 1)
fi

# Iterations per run: long enough (0.1-1 s) that start-up and a stray scheduling
# delay do not set the median (20000 round trips of shm's 0.3 us took 6 ms).
iters() {
  if [ "$1" -ge 4194304 ]; then echo 500
  elif [ "$1" -ge 65536 ]; then echo 10000
  elif [ "$1" -ge 4096 ]; then echo 50000
  else echo 200000; fi
}

# libfabric's provider name for a case: its udp RDM is the rxd utility over udp.
lfprov() { if [ "$1" = udp ] && [ "$2" = rdm ]; then echo "udp;ofi_rxd"; else echo "$1"; fi; }

# shellcheck source=fi-tools/control-port.sh
. fi-tools/control-port.sh

# One run: prints usec/xfer (the 7th column of the data row).
one() { # bin prov ep size [library directory]
  local bin=$1 prov=$2 ep=$3 size=$4 lib=${5:-} port
  port=$(control_port)
  local it; it=$(iters "$size")
  LD_LIBRARY_PATH=$lib "${pin_s[@]}" "$bin" -p "$prov" -e "$ep" -I "$it" -S "$size" -B "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  local out
  out=$(LD_LIBRARY_PATH=$lib timeout 120 "${pin_c[@]}" "$bin" -p "$prov" -e "$ep" -I "$it" -S "$size" -P "$port" 127.0.0.1 2>/dev/null || true)
  wait $srv 2>/dev/null || true
  echo "$out" | awk '$1 ~ /^[0-9]+[kmg]?$/ && NF >= 8 { print $7 }' | tail -1
}

median() { sort -g | awk '{a[NR]=$1} END { if (NR==0) print "nan"; else print a[int((NR+1)/2)] }'; }
best() { sort -g | awk 'NR==1 { print $1 } END { if (NR==0) print "nan" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b+0 > 0 && a+0 > 0) printf "%.2f", a/b; else print "n/a" }'; }

cases=()
provs=(tcp shm)
if [ $# -ge 3 ]; then cases=("$1 $2 $3"); else
  [ $# -ge 1 ] && provs=("$1")
  for p in "${provs[@]}"; do
    case $p in
      tcp) for ep in msg rdm; do for s in 64 4096 65536 1048576; do cases+=("tcp $ep $s"); done; done ;;
      shm) for s in 64 4096 65536 1048576 4194304; do cases+=("shm rdm $s"); done ;;
      udp) cases+=("udp dgram 64"); for s in 64 4096 1048576; do cases+=("udp rdm $s"); done ;;
      *) echo "unknown provider $p (tcp, shm, udp)" >&2; exit 2 ;;
    esac
  done
fi
# Columns: medians, then best runs; each libfabric with the ratio ours/it.
with17=1; [ "$VS" = 2.6 ] && with17=
head=$(printf '%-5s %-5s %8s |' prov ep bytes)
for kind in med best; do
  head+=$(printf ' %9s' "ours $kind")
  [ -n "$with17" ] && head+=$(printf ' %9s %6s' "1.17 $kind" ratio)
  [ -n "$anchor" ] && head+=$(printf ' %9s %6s' "2.6 $kind" ratio)
  [ -n "$rawpp" ] && head+=$(printf ' %9s %6s' "raw $kind" ratio)
  head+=' |'
done
echo "${head% |}"
for c in "${cases[@]}"; do
  set -- $c
  o=(); t=(); n=(); r=()
  for _ in $(seq "$RUNS"); do
    if [ -n "$ourlib" ]; then
      o+=("$(one "$ours" "$(lfprov "$1" "$2")" "$2" "$3" "$ourlib")")
    else
      o+=("$(one "$ours" "$1" "$2" "$3")")
    fi
    [ -n "$with17" ] && t+=("$(one "$theirs" "$(lfprov "$1" "$2")" "$2" "$3")")
    [ -n "$anchor" ] && n+=("$(one "$anchor/bin/fi_pingpong" "$(lfprov "$1" "$2")" "$2" "$3" "$anchor/lib")")
    [ -n "$rawpp" ] && r+=("$(raw "$1" "$3")")
  done
  row=$(printf '%-5s %-5s %8s |' "$1" "$2" "$3")
  for pick in median best; do
    om=$(printf '%s\n' "${o[@]}" | $pick)
    row+=$(printf ' %9s' "$om")
    if [ -n "$with17" ]; then
      tm=$(printf '%s\n' "${t[@]}" | $pick)
      row+=$(printf ' %9s %6s' "$tm" "$(ratio "$om" "$tm")")
    fi
    if [ -n "$anchor" ]; then
      nm=$(printf '%s\n' "${n[@]}" | $pick)
      row+=$(printf ' %9s %6s' "$nm" "$(ratio "$om" "$nm")")
    fi
    if [ -n "$rawpp" ]; then
      rm_=$(printf '%s\n' "${r[@]}" | $pick)
      row+=$(printf ' %9s %6s' "$rm_" "$(ratio "$om" "$rm_")")
    fi
    row+=' |'
  done
  echo "${row% |}"
  if [ -n "${VERBOSE:-}" ]; then echo "    ours: ${o[*]}  1.17: ${t[*]:-}  2.6: ${n[*]:-}  raw: ${r[*]:-}"; fi
done
