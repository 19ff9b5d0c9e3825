# On a host, as: sh -c "<this file>" fluksio-poll PID...
#
# For each worker pid this host's provisioner started: "PID running", or "PID gone" and
# the last line its log said. Alive means the same process: a pid now held by another
# (a later start time) is gone. What a gone worker left is removed once reported.
dir="$HOME/.fluksio/hosts"
for pid in "$@"; do
    state=gone
    note=
    for kept in "$dir"/*.pid; do
        [ -f "$kept" ] || continue
        read -r known start < "$kept" || continue
        [ "$known" = "$pid" ] || continue
        now=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)
        if [ -n "$now" ] && [ "$now" = "$start" ]; then
            state=running
        else
            note=$(tail -n 1 -- "${kept%.pid}.log" 2>/dev/null | tr -d '\r')
            rm -f -- "$kept" "${kept%.pid}.sh" "${kept%.pid}.log"
        fi
    done
    printf '%s %s %s\n' "$pid" "$state" "$note"
done
