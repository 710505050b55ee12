# Sourced by fi-tools/pingpong.sh and benches/compare.sh (not run on its own).
#
# control_port: print a TCP port for a tool's control connection on which nothing
# listens here. Above the kernel's ephemeral range when there is room: a port inside
# it may be held by a closed connection in TIME_WAIT, which refuses a server's bind
# (even with SO_REUSEADDR) and answers no connect, so a probe cannot see it.
control_port() {
    local hi=60999 port
    read -r _ hi < /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
    for _ in $(seq 50); do
        if [ "$hi" -lt 64535 ]; then
            port=$((hi + 1 + RANDOM % (65535 - hi)))
        else
            port=$((20000 + RANDOM % 10000))
        fi
        # A refused connect means nothing listens there.
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    done
    echo "$port"
}
