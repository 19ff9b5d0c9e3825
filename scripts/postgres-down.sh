#!/usr/bin/env bash
# postgres-down.sh: stop the cluster postgres-up.sh started (its data stay, for the next
# postgres-up; remove $FLUKSIO_POSTGRES_STATE to start afresh). Run as root.
set -euo pipefail

STATE=${FLUKSIO_POSTGRES_STATE:-/var/lib/fluksio-postgres}
say() { printf '[postgres-down] %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { say "error: run as root"; exit 1; }
[ -s "$STATE/data/PG_VERSION" ] || { say "no cluster in $STATE/data"; exit 0; }
BIN=$(find /usr/lib/postgresql -maxdepth 3 -path '*/bin/pg_ctl' | sort -V | tail -1 | xargs -r dirname)
if runuser -u postgres -- "$BIN/pg_ctl" -D "$STATE/data" status >/dev/null 2>&1; then
    runuser -u postgres -- "$BIN/pg_ctl" -D "$STATE/data" -m fast -w stop >/dev/null
    say "stopped"
fi
