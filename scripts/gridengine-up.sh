#!/usr/bin/env bash
# gridengine-up.sh: a one-host Grid Engine cell (Debian's gridengine-* packages: one
# qmaster, one execd, a queue "all.q" and a parallel environment "smp"), for the Grid
# Engine plugin's tests. Jobs are submitted over SSH through the login node slurm-up.sh
# brings up (as its job user, who runs the worker it installed), so run that first.
#
# Idempotent: installs what is missing, starts only the daemons that are not running,
# records the pid of each daemon it starts (gridengine-down.sh stops only those), and
# leaves a cell already configured as it is. Ends by printing, and keeping in
# $STATE/gridengine.env, the facts the tests read:  SGE_ROOT=...  SGE_CELL=...  QUEUE=all.q
# PE=smp  SLOTS=<the queue's slots>. Run as root.
#
#   FLUKSIO_SLURM_STATE   the login node's state (keys, pid marks)   [/var/lib/fluksio-slurm]
#   FLUKSIO_GE_SLOTS      the queue's slots                          [4]
set -euo pipefail

STATE=${FLUKSIO_SLURM_STATE:-/var/lib/fluksio-slurm}
SLOTS=${FLUKSIO_GE_SLOTS:-4}
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
MARKS=$STATE/run
export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
HOST=$(hostname)
SPOOL=/var/spool/gridengine
QMASTER_PIDFILE=$SPOOL/qmaster/qmaster.pid

say() { printf '[gridengine-up] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"

# shellcheck source=scripts/pids.sh
. "$CHECKOUT/scripts/pids.sh"
install -d -m 0755 "$STATE" "$MARKS"

# -- packages --------------------------------------------------------------------------
# The master's host name is asked at install time: answered beforehand, so the packages
# set the cell up (its spool, act_qmaster) without a prompt.
if [ ! -x /usr/sbin/sge_qmaster ] || [ ! -x /usr/sbin/sge_execd ] || [ ! -x /usr/bin/qsub ]; then
    say "installing gridengine-master, gridengine-exec, gridengine-client"
    for package in gridengine-common gridengine-master; do
        echo "$package shared/gridenginemaster string $HOST" | debconf-set-selections
    done
    echo "gridengine-common shared/gridenginecell string $SGE_CELL" | debconf-set-selections
    echo "gridengine-common shared/gridengineconfig boolean true" | debconf-set-selections
    bash "$CHECKOUT/scripts/apt-install.sh" gridengine-master gridengine-exec gridengine-client ||
        die "apt-get install of gridengine failed"
fi
COMMON=$SGE_ROOT/$SGE_CELL/common
if [ ! -s "$COMMON/act_qmaster" ] || [ ! -d "$SPOOL/qmaster" ]; then
    # Installed before the answer above was given: the cell was never set up.
    dpkg-reconfigure -f noninteractive gridengine-common gridengine-master >/dev/null 2>&1 ||
        die "dpkg-reconfigure gridengine-master failed"
fi
[ "$(cat "$COMMON/act_qmaster")" = "$HOST" ] || echo "$HOST" >"$COMMON/act_qmaster"
# 127.0.0.1 resolves to "localhost" first here, and Grid Engine refuses a client whose
# address resolves to another name than the master's: make the two one host.
if [ "$HOST" != localhost ] && ! grep -qx "$HOST localhost" "$COMMON/host_aliases" 2>/dev/null; then
    echo "$HOST localhost" >>"$COMMON/host_aliases"
fi

# -- daemons ---------------------------------------------------------------------------
answers() { timeout 10 qconf -sh >/dev/null 2>&1; }
if ! running_from "$QMASTER_PIDFILE" sge_qmaster >/dev/null; then
    say "starting sge_qmaster"
    /usr/sbin/sge_qmaster || die "sge_qmaster did not start (see $SPOOL/qmaster/messages)"
fi
for _ in $(seq 150); do answers && break; sleep 0.1; done
answers || die "sge_qmaster does not answer (see $SPOOL/qmaster/messages)"
pid=$(running_from "$QMASTER_PIDFILE" sge_qmaster) || die "sge_qmaster is not running"
[ -e "$MARKS/sge_qmaster.pid" ] || mark sge_qmaster "$pid" sge_qmaster

qconf -sh 2>/dev/null | grep -qx "$HOST" || qconf -ah "$HOST" >/dev/null 2>&1
qconf -ss 2>/dev/null | grep -qx "$HOST" || qconf -as "$HOST" >/dev/null 2>&1

execd_pid() {  # the execd's spool directory is named as it resolves itself
    local file
    for file in "$SPOOL"/execd/*/execd.pid; do running_from "$file" sge_execd && return 0; done
    return 1
}
if ! execd_pid >/dev/null; then
    say "starting sge_execd"
    /usr/sbin/sge_execd || die "sge_execd did not start"
    for _ in $(seq 150); do execd_pid >/dev/null && break; sleep 0.1; done
fi
pid=$(execd_pid) || die "sge_execd is not running (see $SPOOL/execd/*/messages)"
[ -e "$MARKS/sge_execd.pid" ] || mark sge_execd "$pid" sge_execd

# -- the cell's configuration ----------------------------------------------------------
conf=$(mktemp -d)
trap 'rm -rf "$conf"' EXIT
# Schedule every second, and at each submission and job end: tests wait for jobs.
qconf -ssconf | sed -e 's/^schedule_interval .*/schedule_interval 0:0:1/' \
    -e 's/^flush_submit_sec .*/flush_submit_sec 1/' -e 's/^flush_finish_sec .*/flush_finish_sec 1/' \
    >"$conf/sched"
qconf -ssconf | cmp -s - "$conf/sched" || qconf -Msconf "$conf/sched" >/dev/null 2>&1
if ! qconf -spl 2>/dev/null | grep -qx smp; then
    cat >"$conf/pe" <<EOF
pe_name            smp
slots              9999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    \$pe_slots
control_slaves     FALSE
job_is_first_task  TRUE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
EOF
    qconf -Ap "$conf/pe" >/dev/null 2>&1 || die "qconf -Ap smp failed"
fi
if ! qconf -sql 2>/dev/null | grep -qx all.q; then
    # The template every field of a queue is in, changed where this cell differs.
    # (qconf exits 1 when the editor leaves the template unchanged: expected here.)
    { EDITOR=cat qconf -aq 2>/dev/null || true; } | sed -e 's/^qname .*/qname all.q/' \
        -e "s/^hostlist .*/hostlist $HOST/" -e "s/^slots .*/slots $SLOTS/" \
        -e 's/^pe_list .*/pe_list smp/' -e 's/^load_thresholds .*/load_thresholds NONE/' \
        -e 's/^shell .*/shell \/bin\/sh/' >"$conf/queue"
    qconf -Aq "$conf/queue" >/dev/null 2>&1 || die "qconf -Aq all.q failed"
fi
# A queue left in error by an execd that went away is usable again.
qmod -c all.q >/dev/null 2>&1 || true

for _ in $(seq 100); do
    qstat -f -q all.q 2>/dev/null | grep -q "^all.q@" && break
    sleep 0.1
done
facts="SGE_ROOT=$SGE_ROOT
SGE_CELL=$SGE_CELL
QUEUE=all.q
PE=smp
SLOTS=$SLOTS"
printf '%s\n' "$facts" >"$STATE/gridengine.env"
printf '%s\n' "$facts"
