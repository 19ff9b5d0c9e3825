# On a host, as: sh -c "<this file>" fluksio-stop REQUEST_ID [PID]
#
# Stop a request's worker (named by its request, or by its PID when the request is not
# known here) and remove what its start left: TERM to its whole session, KILL 10 s later
# if it has not ended. Only the process the start recorded (its pid and start time) is
# signalled: a later process that reuses the pid never is.
dir="$HOME/.fluksio/hosts"
kept="$dir/$1.pid"
if [ -n "${2:-}" ]; then
    for candidate in "$dir"/*.pid; do
        [ -f "$candidate" ] || continue
        read -r known _ < "$candidate" || continue
        [ "$known" = "$2" ] && kept=$candidate
    done
fi
if [ -f "$kept" ] && read -r pid start < "$kept"; then
    alive() {
        now=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)
        [ -n "$now" ] && [ "$now" = "$start" ]
    }
    if alive; then
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
        waited=0
        while alive && [ "$waited" -lt 100 ]; do sleep 0.1; waited=$((waited + 1)); done
        alive && { kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; }
    fi
fi
request=${kept##*/}
request=${request%.pid}
[ -n "$request" ] && rm -f -- "$kept" "$dir/$request.sh" "$dir/$request.log" "$HOME/.fluksio/tokens/$request"
exit 0
