#!/usr/bin/env bash
# slurm-down.sh: stop what slurm-up.sh started, each daemon by the pid it recorded, and
# only while that pid still runs the program it started. Jobs still queued are cancelled
# first: a job's processes outlive slurmd otherwise. Packages and users stay. Run as root.
set -uo pipefail
STATE=${FLUKSIO_SLURM_STATE:-/var/lib/fluksio-slurm}
MARKS=$STATE/run
say() { printf '[slurm-down] %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { say "run as root"; exit 1; }

# shellcheck source=scripts/pids.sh
. "$(cd "$(dirname "$0")" && pwd)/pids.sh"
ours() {  # ours NAME -> the pid of a daemon slurm-up.sh started that still runs
    local pid comm
    [ -r "$MARKS/$1.pid" ] || return 1
    read -r pid comm <"$MARKS/$1.pid"
    alive "$pid" "$comm" && echo "$pid"
}

if ours slurmctld >/dev/null; then
    jobs=$(squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [ -n "${jobs// /}" ]; then
        say "cancelling jobs $jobs"
        scancel $jobs 2>/dev/null || true
        for _ in $(seq 100); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
    fi
fi
status=0
for daemon in slurmd slurmctld slurmdbd mariadbd sshd box-sshd munged; do stop_marked "$daemon" || status=1; done
exit $status
