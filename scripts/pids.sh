# pids.sh: sourced by slurm-up.sh, gridengine-up.sh and their -down scripts. A daemon is
# stopped only by the pid its -up script recorded in $MARKS/NAME.pid ("PID COMM"), and
# only while that pid still runs COMM: never by name (no pkill/killall).

# A zombie does not count as alive: PID 1 in a container may reap late, and its
# /proc/PID/comm still reads the old name.
alive() {
    [ -n "${1:-}" ] && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] &&
        [ "$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$1/status" 2>/dev/null)" != Z ]
}

# running_from PIDFILE COMM -> prints the pid a daemon wrote, if it still runs COMM.
running_from() {
    local pid
    pid=$(tr -dc '0-9' 2>/dev/null <"$1") || return 1
    alive "$pid" "$2" && echo "$pid"
}

# mark NAME PID COMM: record a daemon this script started, for stop_marked.
mark() { printf '%s %s\n' "$2" "$3" >"$MARKS/$1.pid"; }

# stop_marked NAME: SIGTERM, 15 s, then SIGKILL; forget the mark.
stop_marked() {
    local pid comm
    [ -r "$MARKS/$1.pid" ] || return 0
    read -r pid comm <"$MARKS/$1.pid"
    if alive "$pid" "$comm"; then
        kill -TERM "$pid"
        for _ in $(seq 150); do alive "$pid" "$comm" || break; sleep 0.1; done
        alive "$pid" "$comm" && kill -KILL "$pid"
        printf '[down] stopped %s (pid %s)\n' "$1" "$pid" >&2
    fi
    rm -f "$MARKS/$1.pid"
}
