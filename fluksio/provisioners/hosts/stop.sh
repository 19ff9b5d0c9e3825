# On a host, as: sh -c "<this file>" fluksio-stop REQUEST_ID [PID]
#
# Stop a request's worker (named by its request, or by its PID when the request is not
# known here) and remove what its start left: TERM to its whole process group, then, once
# it has ended or 10 s later, KILL to every process still carrying the request's mark in
# its environment (a call in a session of its own, a prerun's child): nothing of it is left.
# Only the process the start recorded (its pid and start time) is signalled by pid: a
# later process that reuses the pid never is. POSIX sh: dash and bash alike.
dir="$HOME/.fluksio/hosts"
kept="$dir/$1.pid"
if [ -n "${2:-}" ]; then
    for candidate in "$dir"/*.pid; do
        [ -f "$candidate" ] || continue
        read -r known _ < "$candidate" || continue
        [ "$known" = "$2" ] && kept=$candidate
    done
fi
request=${kept##*/}
request=${request%.pid}
if [ -f "$kept" ] && read -r pid start < "$kept"; then
    alive() {
        now=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)
        [ -n "$now" ] && [ "$now" = "$start" ]
    }
    if alive; then
        # The start made it a session (and group) leader; `--` before a negative pid is
        # what both dash's and bash's kill accept.
        kill -s TERM -- "-$pid" 2>/dev/null || kill -s TERM "$pid" 2>/dev/null
        waited=0
        while alive && [ "$waited" -lt 100 ]; do sleep 0.1; waited=$((waited + 1)); done
        alive && { kill -s KILL -- "-$pid" 2>/dev/null || kill -s KILL "$pid" 2>/dev/null; }
    fi
fi
if [ -n "$request" ]; then
    # What escaped the group still carries the mark; a process forking as it is swept is
    # caught by the next round.
    mark="FLUKSIO_PROVISION_MARK=fluksio-request=$request"
    rounds=0
    while [ "$rounds" -lt 20 ]; do
        left=$(grep -lzxF -- "$mark" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3)
        [ -n "$left" ] || break
        # shellcheck disable=SC2086
        kill -s KILL $left 2>/dev/null
        sleep 0.1
        rounds=$((rounds + 1))
    done
    rm -f -- "$kept" "$dir/$request.sh" "$dir/$request.log" "$HOME/.fluksio/tokens/$request"
fi
exit 0
