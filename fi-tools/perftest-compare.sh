#!/bin/sh
# Run the same perftest command lines against perftest's ib_* programs and
# against fabric's fi_* ones (fi_send_lat & co.), print both programs' tables,
# and read each table's figure with the one parser (perftest_figure below, what
# a script written for perftest does): it works on both outputs unchanged.
#
# Usage:
#   fi-tools/perftest-compare.sh [--ours DIR] [--perftest DIR] [--provider NAME]
#       [--addr HOST] [--timeout SECS] [--only-ours] 'TEST OPTIONS' ...
# Each 'TEST OPTIONS' is one argument: a test (send_lat, send_bw, write_lat,
# write_bw, read_lat, read_bw, atomic_lat, atomic_bw) and perftest's options,
# e.g. 'send_lat -s 64 -n 1000 -R -d rxe0'. For each, the server runs
# `ib_send_lat OPTIONS` and the client `ib_send_lat OPTIONS HOST`, then the same
# with `fi_send_lat --provider NAME OPTIONS`.
#   --ours DIR       where fi_send_lat & co. are (default: build them with
#                    fi-tools/built.sh, wherever cargo puts them)
#   --perftest DIR   where ib_send_lat & co. are (default: PATH)
#   --provider NAME  fabric's provider (default verbs)
#   --addr HOST      the server's address for both clients (default 127.0.0.1)
#   --only-ours      run fabric's tools alone (a machine without an RDMA device)
#   --strict         a failed run of perftest's fails the script too
#   --parse FILE...  read the figure of saved outputs and run nothing: one line
#                    each, the figure and its unit or "- (no figure)" (then the
#                    status is 1)
# Prints one line per run and program:
#   COMPARE <test> <options> | <program> <figure> <unit>
# and exits non-zero when a run of fabric's fails or its figure cannot be read.
# A run of perftest's that fails (perftest gives up on a loaded machine: its
# clock calibration prints "inf", a client times out) is reported in a line
#   COMPARE <test> <options> | <program> failed: perftest's run, not fabric's
# and changes the status only with --strict.
# POSIX sh: it also runs under busybox in the verbs guest.
set -u

prog=perftest-compare.sh
ours=""
theirs=""
provider=verbs
addr=127.0.0.1
limit=300
only_ours=0
strict=0
parse=0
die() { echo "$prog: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --ours) [ $# -ge 2 ] || die "--ours needs a directory"; ours=$2; shift 2 ;;
        --perftest) [ $# -ge 2 ] || die "--perftest needs a directory"; theirs=$2; shift 2 ;;
        --provider) [ $# -ge 2 ] || die "--provider needs a name"; provider=$2; shift 2 ;;
        --addr) [ $# -ge 2 ] || die "--addr needs a host"; addr=$2; shift 2 ;;
        --timeout) [ $# -ge 2 ] || die "--timeout needs seconds"; limit=$2; shift 2 ;;
        --only-ours) only_ours=1; shift ;;
        --strict) strict=1; shift ;;
        --parse) parse=1; shift; break ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        --) shift; break ;;
        -*) die "unknown option $1" ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || die "give at least one 'TEST OPTIONS' (e.g. 'send_lat -s 64'), or --parse FILE..."
case "$limit" in ''|*[!0-9]*) die "--timeout: not a number of seconds: $limit" ;; esac

# The figure perftest scripts read: the first result row under the table's
# header, its t_typical (latency tables, the 5th field), its t_avg (duration
# mode's latency table, the 3rd) or its BW average (bandwidth tables, the 4th);
# with --output, the number alone on its line.
perftest_figure() {
    awk '/^ #bytes/ { hdr = $0; getline
                      if (hdr ~ /t_typical/) print $5; else if (hdr ~ /t_avg/) print $3; else print $4; exit }
         /^[0-9]+\.[0-9]+$/ { print; exit }' "$1"
}
perftest_unit() {
    awk '/^ #bytes/ { if ($0 ~ /usec/) print "usec"; else if ($0 ~ /Gb\/sec/) print "Gb/sec"; else print "MB/sec"; exit }
         /^[0-9]+\.[0-9]+$/ { print "(--output)"; exit }' "$1"
}

if [ "$parse" = 1 ]; then
    st=0
    for f in "$@"; do
        [ -r "$f" ] || die "cannot read $f"
        fig=$(perftest_figure "$f")
        if [ -n "$fig" ]; then echo "$fig $(perftest_unit "$f")"; else echo "- (no figure)"; st=1; fi
    done
    exit $st
fi

if [ -z "$ours" ]; then
    here=$(cd "$(dirname "$0")" && pwd)
    built=$(cd "$here/.." && fi-tools/built.sh build --release -p fi-tools) || die "building fi-tools failed"
    ours=$(dirname "$(printf '%s\n' "$built" | awk '$1 == "fi_send_lat" { print $2 }')")
fi
[ -x "$ours/fi_send_lat" ] || die "no fi_send_lat in $ours"


tmp=$(mktemp -d "${TMPDIR:-/tmp}/perftest-compare.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT INT TERM

# run LABEL TEST PROGRAM OPTIONS...: server, then client; print the client's
# output and a COMPARE line. Status 1 when something failed.
run() {
    label=$1; t=$2; p=$3; shift 3
    echo "==== $label: $(basename "$p") $*"
    # The server is bounded too: a server whose client gave up would be
    # waited for for ever.
    timeout $((limit + 30)) "$p" "$@" > "$tmp/srv.txt" 2>&1 &
    spid=$!
    sleep 1
    st=0
    timeout "$limit" "$p" "$@" "$addr" > "$tmp/cli.txt" 2>&1 || st=$?
    sw=0
    wait $spid || sw=$?
    cat "$tmp/cli.txt"
    if [ $st -ne 0 ] || [ $sw -ne 0 ]; then
        echo "-- client exit $st, server exit $sw; server output:"
        cat "$tmp/srv.txt"
        return 1
    fi
    fig=$(perftest_figure "$tmp/cli.txt")
    case "$fig" in
        ''|*[!0-9.]*) echo "COMPARE $t $opts | $(basename "$p") (no figure read)"; return 1 ;;
    esac
    echo "COMPARE $t $opts | $(basename "$p") $fig $(perftest_unit "$tmp/cli.txt")"
}

fail=0
for line in "$@"; do
    # shellcheck disable=SC2086 # the options are words, as on a command line
    set -- $line
    t=$1
    shift
    opts=$*
    case "$t" in
        send_lat|send_bw|write_lat|write_bw|read_lat|read_bw|atomic_lat|atomic_bw) ;;
        *) die "unknown test '$t' in '$line'" ;;
    esac
    if [ "$only_ours" = 0 ]; then
        ib=ib_$t
        if [ -n "$theirs" ]; then ib=$theirs/ib_$t; else ib=$(command -v "ib_$t") || die "ib_$t not found (install perftest)"; fi
        # shellcheck disable=SC2086
        if ! run perftest "$t" "$ib" $opts; then
            echo "COMPARE $t $opts | $(basename "$ib") failed: perftest's run, not fabric's"
            [ "$strict" = 0 ] || fail=1
        fi
    fi
    # shellcheck disable=SC2086
    run fabric "$t" "$ours/fi_$t" --provider "$provider" $opts || fail=1
done
exit $fail
