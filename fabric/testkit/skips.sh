#!/bin/sh
# Summarise the skips a test run logged (FABRIC_SKIP_LOG=FILE): how many, by area,
# and each distinct reason with its count. POSIX sh and awk (also busybox's, in the
# verbs guest). Usage: skips.sh FILE [TITLE]
log=$1
title=${2:-tests}
if [ ! -s "$log" ]; then
    echo "SKIPS ($title): none"
    exit 0
fi
awk -v title="$title" '
    {
        n++
        absent = ($2 == "(absent)")
        if (absent) a++
        match($0, /\[[^]]*\]/)
        area = substr($0, RSTART + 1, RLENGTH - 2)
        by[(absent ? "absent " : "") area]++
        # The reason: what follows the test name.
        r = $0
        sub(/^skipped (\(absent\) )?\[[^]]*\] [^ ]*: /, "", r)
        why[(absent ? "(absent) " : "") "[" area "] " r]++
    }
    END {
        printf "SKIPS (%s): %d, of which %d absent by the provider'"'"'s own Info\n", title, n, a
        for (k in by) printf "  %-20s %d\n", k, by[k]
        for (k in why) printf "  %4d x %s\n", why[k], k | "sort -rn"
    }' "$log"
