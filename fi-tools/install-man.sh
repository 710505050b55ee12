#!/usr/bin/env bash
# Install fabric's manual pages (fi-tools/man/man1/*.1, man7/*.7) under MANDIR,
# into MANDIR/man1 and MANDIR/man7.
#   fi-tools/install-man.sh                      # into /usr/local/share/man
#   fi-tools/install-man.sh --gzip ~/.local/share/man
# --gzip compresses each installed page (page.1.gz), as distributions ship them;
# man reads both. To read the pages without installing them:
#   man -M fi-tools/man fi_info        or   MANPATH=$PWD/fi-tools/man: man fabric_tcp
#   man -l fi-tools/man/man7/fabric.7
set -euo pipefail

usage() {
    echo "usage: $0 [--gzip] [MANDIR]   (MANDIR defaults to /usr/local/share/man)" >&2
    exit 2
}

gzip=0
mandir=
for a in "$@"; do
    case $a in
    --gzip) gzip=1 ;;
    -h | --help) usage ;;
    -*) echo "$0: unknown option $a" >&2; usage ;;
    *)
        [ -z "$mandir" ] || usage
        mandir=$a
        ;;
    esac
done
mandir=${mandir:-/usr/local/share/man}
src=$(cd "$(dirname "$0")/man" && pwd)

n=0
for sec in 1 7; do
    pages=("$src/man$sec"/*."$sec")
    [ -e "${pages[0]}" ] || continue
    install -d -m 0755 "$mandir/man$sec"
    for p in "${pages[@]}"; do
        dest=$mandir/man$sec/$(basename "$p")
        if [ "$gzip" = 1 ]; then
            rm -f "$dest"
            gzip -9 -n -c "$p" >"$dest.gz.tmp"
            chmod 0644 "$dest.gz.tmp"
            mv -f "$dest.gz.tmp" "$dest.gz"
        else
            rm -f "$dest.gz"
            install -m 0644 "$p" "$dest"
        fi
        n=$((n + 1))
    done
done
echo "installed $n pages under $mandir"
# man finds the pages at once; apropos and whatis see them after man-db's next
# index run (its daily job, or `mandb` by hand).
