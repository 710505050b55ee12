#!/usr/bin/env bash
# Remove the shared-memory regions libfabric's shm provider left in /dev/shm for
# processes that no longer run. libfabric names a region <pid>:<endpoint>:<n>[:<n>]
# and unlinks it only when the endpoint is closed, which lf_inproc (and a killed
# fi_pingpong) never does: every benchmark run over libfabric's shm leaves 16-32 MB.
#   benches/lf-shm-clean.sh MARKER    # only regions newer than the file MARKER
#   benches/lf-shm-clean.sh           # every such region of a dead process
# Touches only files of that exact name shape, owned by this user, whose pid is
# not running; our own segments (fabric-shm-*) are cleaned by the provider itself.
set -euo pipefail
dir=${LF_SHM_DIR:-/dev/shm}
newer=()
[ $# -ge 1 ] && [ -e "$1" ] && newer=(-newer "$1")
n=0
while IFS= read -r f; do
  name=${f##*/}
  [[ $name =~ ^([0-9]+):[0-9]+:[0-9]+(:[0-9]+)?$ ]] || continue
  [ -d "/proc/${BASH_REMATCH[1]}" ] && continue
  rm -f -- "$f" && n=$((n + 1))
done < <(find "$dir" -maxdepth 1 -type f -user "$(id -u)" "${newer[@]}" 2>/dev/null)
[ "${VERBOSE:-0}" = 1 ] && echo "lf-shm-clean: removed $n regions" >&2
exit 0
