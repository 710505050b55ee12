#!/bin/sh
# Open MPI's launch agent (--mca plm_rsh_agent) for "hosts" that are network
# namespaces (tests/mpi_hosts.rs). mpirun runs it as it would run ssh:
#
#   netns_agent.sh HOST COMMAND...
#
# and it runs COMMAND inside the network namespace named HOST (`ip netns`),
# with HOST as the host name (in a UTS namespace of its own, so each "host"
# has its own name), through a shell as sshd would: Open MPI quotes the
# daemon's arguments for that shell.
set -e
if [ $# -lt 2 ]; then
    echo "usage: $0 HOST COMMAND..." >&2
    exit 2
fi
host=$1
shift
exec ip netns exec "$host" unshare --uts \
    sh -c 'echo "$0" >/proc/sys/kernel/hostname && exec sh -c "$1"' "$host" "$*"
