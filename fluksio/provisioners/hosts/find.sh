# On a host, as: sh -c "<this file>" fluksio-find
#
# The workers this host's provisioner started that still run: "REQUEST_ID PID" each
# (a restarted engine adopts them by their request, never starting a second).
dir="$HOME/.fluksio/hosts"
for kept in "$dir"/*.pid; do
    [ -f "$kept" ] || continue
    read -r pid start < "$kept" || continue
    now=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)
    if [ -n "$now" ] && [ "$now" = "$start" ]; then
        request=${kept##*/}
        printf '%s %s\n' "${request%.pid}" "$pid"
    fi
done
