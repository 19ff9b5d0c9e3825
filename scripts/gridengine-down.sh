#!/usr/bin/env bash
# gridengine-down.sh: stop what gridengine-up.sh started, each daemon by the pid it
# recorded and only while that pid still runs the program it started. Jobs still queued
# are deleted first. Packages and the cell's configuration stay. Run as root.
set -uo pipefail
STATE=${FLUKSIO_SLURM_STATE:-/var/lib/fluksio-slurm}
MARKS=$STATE/run
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
say() { printf '[gridengine-down] %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { say "run as root"; exit 1; }

# shellcheck source=scripts/pids.sh
. "$(cd "$(dirname "$0")" && pwd)/pids.sh"
if [ -r "$MARKS/sge_qmaster.pid" ]; then
    read -r pid comm <"$MARKS/sge_qmaster.pid"
    if alive "$pid" "$comm"; then
        qdel -u '*' >/dev/null 2>&1 || true
        for _ in $(seq 100); do [ -z "$(qstat -u '*' 2>/dev/null)" ] && break; sleep 0.2; done
    fi
fi
status=0
for daemon in sge_execd sge_qmaster; do stop_marked "$daemon" || status=1; done
exit $status
