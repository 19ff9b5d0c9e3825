# On a host, after deliver.sh, as: sh -c "<both>" fluksio-start TOKEN_FILE CA_FILE REQUEST_ID
#
# The worker's script follows the token on stdin. The worker starts detached (a session
# of its own, nothing of this SSH session held open), and its pid and start time are
# kept: they tell it from a later process that reuses the pid. Prints "PID START".
dir="$HOME/.fluksio/hosts"
mkdir -p -- "$dir" || exit
cat > "$dir/$3.sh" || exit
shell=$(command -v bash || echo sh)
setsid "$shell" "$dir/$3.sh" > "$dir/$3.log" 2>&1 < /dev/null &
pid=$!
start=$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f20) || exit
printf '%s %s\n' "$pid" "$start" > "$dir/$3.pid" || exit
printf '%s %s\n' "$pid" "$start"
