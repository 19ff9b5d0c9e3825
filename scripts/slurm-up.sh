#!/usr/bin/env bash
# slurm-up.sh: a single-node Slurm cluster and an SSH "login node" on 127.0.0.1, for the
# Slurm provisioner's tests and for trying provisioners.json on a laptop-sized machine.
#
# Idempotent: installs what is missing (Debian packages), writes the configuration, starts
# only the daemons that are not running, records the pid of each daemon it starts (so
# slurm-down.sh stops only those), and installs fluksio-worker from this checkout into a
# virtualenv the job user can run. Jobs run as an unprivileged user, as on a real cluster.
# Ends by printing the facts a provisioners.json needs, one KEY=value per line:
#   LOGIN=user@host  PORT=<ssh port>  KEY=<private key>  KNOWN_HOSTS=<file>
#   WORKER=<fluksio-worker the job user can run>  PRERUN=<line that puts it on PATH>
# The same lines are kept in $STATE/env for the test suite. Run as root.
#
#   FLUKSIO_SLURM_STATE     state: keys, configs, pid marks, env   [/var/lib/fluksio-slurm]
#   FLUKSIO_SLURM_SSH_PORT  port of the dedicated sshd             [2222]
#   FLUKSIO_SLURM_USER      ssh login and job user (made if absent) [hpcuser]
#   FLUKSIO_BOX_SSH_PORT    port of a second machine's sshd         [2223]
#   FLUKSIO_BOX_USER        that machine's user (made if absent)    [boxuser]
#
# The second machine (BOX_LOGIN, BOX_PORT) is for the SSH hosts provisioner's tests: a
# GPU box of one's own, another sshd as another user, beside the login node.
set -euo pipefail

STATE=${FLUKSIO_SLURM_STATE:-/var/lib/fluksio-slurm}
SSH_PORT=${FLUKSIO_SLURM_SSH_PORT:-2222}
BOX_PORT=${FLUKSIO_BOX_SSH_PORT:-2223}
BOX_USER=${FLUKSIO_BOX_USER:-boxuser}
JOB_USER=${FLUKSIO_SLURM_USER:-hpcuser}
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
MARKS=$STATE/run
SLURM_RUN=/run/slurm
SSHD_PIDFILE=/run/fluksio-slurm-sshd.pid
BOX_PIDFILE=/run/fluksio-box-sshd.pid
MUNGE_PIDFILE=/run/munge/munged.pid
TAG="# written by fluksio scripts/slurm-up.sh"

say() { printf '[slurm-up] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"

# shellcheck source=scripts/pids.sh
. "$CHECKOUT/scripts/pids.sh"
await_pidfile() {  # await_pidfile PIDFILE COMM -> prints the pid, within 15 s
    local i
    for i in $(seq 150); do running_from "$1" "$2" && return 0; sleep 0.1; done
    return 1
}

install -d -m 0755 "$STATE" "$MARKS"

# -- packages --------------------------------------------------------------------------
need=""
# oathtool and pam_oath: the tests' second login node asks for a TOTP code, as real sites do.
# slurmdbd and MariaDB: the accounting that holds a site's association and QOS limits.
for bin in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/bin/sbatch /usr/sbin/munged /usr/sbin/sshd \
    /usr/bin/oathtool /lib/x86_64-linux-gnu/security/pam_oath.so /usr/sbin/slurmdbd /usr/sbin/mariadbd; do
    [ -x "$bin" ] || need=1
done
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || need=1
if [ -n "$need" ]; then
    say "installing slurm, slurmdbd, mariadb, munge, openssh-server, python3-venv, libpam-oath, oathtool"
    made_policy=""
    # Keep the packages' scripts from starting services (an sshd on 0.0.0.0:22).
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    pkgs="slurmctld slurmd slurm-client slurmdbd mariadb-server munge openssh-server openssh-client python3-venv libpam-oath oathtool"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends $pkgs >"$STATE/apt.log" 2>&1; then
        apt-get update -q >>"$STATE/apt.log" 2>&1 || true
        apt-get install -y -q --no-install-recommends $pkgs >>"$STATE/apt.log" 2>&1 ||
            { [ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d; tail -20 "$STATE/apt.log"; die "apt-get install failed"; }
    fi
    [ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
fi

# -- host name: Slurm binds to what it resolves to, so it must be loopback -------------
NODE=$(hostname -s)
getent hosts "$NODE" >/dev/null || printf '127.0.0.1 %s %s\n' "$NODE" "$TAG" >>/etc/hosts

# -- munge -----------------------------------------------------------------------------
install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
install -d -o munge -g munge -m 0755 /run/munge
[ -s /etc/munge/munge.key ] || runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock "$MUNGE_PIDFILE"
    runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PIDFILE" || die "munged did not start"
    pid=$(await_pidfile "$MUNGE_PIDFILE" munged) || die "munged wrote no pid file"
    mark munged "$pid" munged
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

# -- slurm.conf --------------------------------------------------------------------------
getent passwd slurm >/dev/null ||
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin slurm
install -d -o slurm -g slurm -m 0755 /var/spool/slurmctld /var/log/slurm "$SLURM_RUN"
install -d -m 0755 /var/spool/slurmd /etc/slurm
hardware=$(slurmd -C | head -1)
field() { printf '%s\n' "$hardware" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
CPUS=$(field CPUs)
# Declared with more CPUs than it has (slurmd believes slurm.conf: config_overrides), so
# several one-core jobs run at once on a 2-core machine, as on a real cluster's nodes.
DECLARED_CPUS=$((CPUS < 8 ? 8 : CPUS))
MEM=$(field RealMemory)
# slurmd drains a node that has less memory than configured: leave 5 % (at least 512 MB).
REAL_MEM=$((MEM - (MEM / 20 > 512 ? MEM / 20 : 512)))
cat >"$STATE/slurm.conf.new" <<CONF
$TAG
ClusterName=fluksiotest
SlurmctldHost=$NODE(127.0.0.1)
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$SLURM_RUN/slurmctld.pid
SlurmdPidFile=$SLURM_RUN/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SchedulerType=sched/backfill
# Start batch jobs at once instead of on Slurm's 3 s scheduling pass.
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# A job without --mem gets its share of the node, not all of it.
DefMemPerCPU=$((REAL_MEM / DECLARED_CPUS))
# Refuse at submission what can never run (a missing partition, too many CPUs).
EnforcePartLimits=ALL
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=3600
KillWait=5
Waittime=0
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$DECLARED_CPUS RealMemory=$REAL_MEM State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
changed=""
if ! cmp -s "$STATE/slurm.conf.new" /etc/slurm/slurm.conf; then
    if [ -e /etc/slurm/slurm.conf ] && ! head -1 /etc/slurm/slurm.conf | grep -qF "$TAG"; then
        cp -p /etc/slurm/slurm.conf "/etc/slurm/slurm.conf.before-fluksio"
    fi
    install -m 0644 "$STATE/slurm.conf.new" /etc/slurm/slurm.conf
    changed=1
fi
rm -f "$STATE/slurm.conf.new"

# -- accounting: MariaDB, slurmdbd, the cluster and the job user's account ---------------
getent passwd "$JOB_USER" >/dev/null || useradd --create-home --shell /bin/bash "$JOB_USER"
# shellcheck source=scripts/slurm-accounting.sh
. "$CHECKOUT/scripts/slurm-accounting.sh"

# -- slurm daemons -----------------------------------------------------------------------
if [ -n "$changed" ]; then
    stop_marked slurmd
    stop_marked slurmctld
fi
if ! running_from "$SLURM_RUN/slurmctld.pid" slurmctld >/dev/null; then
    /usr/sbin/slurmctld || { tail -20 /var/log/slurm/slurmctld.log; die "slurmctld did not start"; }
    pid=$(await_pidfile "$SLURM_RUN/slurmctld.pid" slurmctld) || die "slurmctld is not running"
    mark slurmctld "$pid" slurmctld
fi
if ! running_from "$SLURM_RUN/slurmd.pid" slurmd >/dev/null; then
    /usr/sbin/slurmd -N "$NODE" || { tail -20 /var/log/slurm/slurmd.log; die "slurmd did not start"; }
    pid=$(await_pidfile "$SLURM_RUN/slurmd.pid" slurmd) || die "slurmd is not running"
    mark slurmd "$pid" slurmd
fi
resumed=""
state=""
for i in $(seq 300); do
    state=$(sinfo -h -n "$NODE" -o %t 2>/dev/null | head -1 || true)
    case "$state" in
    idle | mix | alloc) break ;;
    drain* | down* | inval* | drng* | fail*)
        # A node drained by an earlier configuration stays drained until resumed.
        if [ -z "$resumed" ] && [ "$i" -gt 10 ]; then
            scontrol update nodename="$NODE" state=resume 2>/dev/null || true
            resumed=1
        fi
        ;;
    esac
    sleep 0.2
done
case "$state" in idle | mix | alloc) ;; *) die "node $NODE is '$state', not idle, after 60 s" ;; esac

# -- the login node: a dedicated sshd on loopback -----------------------------------------
# '*': no password, but not locked ('!'), which sshd without PAM refuses.
[ "$(getent shadow "$JOB_USER" | cut -d: -f2)" = '*' ] || usermod -p '*' "$JOB_USER"
JOB_HOME=$(getent passwd "$JOB_USER" | cut -d: -f6)
JOB_GROUP=$(id -gn "$JOB_USER")
KEY=$STATE/client_ed25519
HOST_KEY=$STATE/ssh_host_ed25519_key
KNOWN_HOSTS=$STATE/known_hosts
[ -s "$KEY" ] || ssh-keygen -q -t ed25519 -N '' -C fluksio-slurm-client -f "$KEY"
[ -s "$HOST_KEY" ] || ssh-keygen -q -t ed25519 -N '' -C fluksio-slurm-host -f "$HOST_KEY"
chmod 0600 "$KEY" "$HOST_KEY"
install -d -o "$JOB_USER" -g "$JOB_GROUP" -m 0700 "$JOB_HOME/.ssh"
touch "$JOB_HOME/.ssh/authorized_keys"
grep -qxF "$(cat "$KEY.pub")" "$JOB_HOME/.ssh/authorized_keys" || cat "$KEY.pub" >>"$JOB_HOME/.ssh/authorized_keys"
chown "$JOB_USER:$JOB_GROUP" "$JOB_HOME/.ssh/authorized_keys"
chmod 0600 "$JOB_HOME/.ssh/authorized_keys"
host_public=$(cut -d' ' -f1,2 "$HOST_KEY.pub")
printf '[127.0.0.1]:%s %s\n[localhost]:%s %s\n[127.0.0.1]:%s %s\n' "$SSH_PORT" "$host_public" \
    "$SSH_PORT" "$host_public" "$BOX_PORT" "$host_public" >"$KNOWN_HOSTS"
chmod 0644 "$KNOWN_HOSTS"
cat >"$STATE/sshd_config.new" <<CONF
$TAG
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $HOST_KEY
PidFile $SSHD_PIDFILE
AuthenticationMethods publickey
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowUsers $JOB_USER
X11Forwarding no
AllowTcpForwarding yes
GatewayPorts no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 50
CONF
sshd_changed=""
cmp -s "$STATE/sshd_config.new" "$STATE/sshd_config" || sshd_changed=1
mv "$STATE/sshd_config.new" "$STATE/sshd_config"
install -d -m 0755 /run/sshd
/usr/sbin/sshd -t -f "$STATE/sshd_config" || die "sshd rejects $STATE/sshd_config"
[ -n "$sshd_changed" ] && stop_marked sshd
if ! running_from "$SSHD_PIDFILE" sshd >/dev/null; then
    /usr/sbin/sshd -f "$STATE/sshd_config" -E "$STATE/sshd.log" || die "sshd did not start"
    pid=$(await_pidfile "$SSHD_PIDFILE" sshd) || die "sshd is not running"
    mark sshd "$pid" sshd
fi
# -- a second machine: another sshd, another user ----------------------------------------
getent passwd "$BOX_USER" >/dev/null || useradd --create-home --shell /bin/bash "$BOX_USER"
[ "$(getent shadow "$BOX_USER" | cut -d: -f2)" = '*' ] || usermod -p '*' "$BOX_USER"
BOX_HOME=$(getent passwd "$BOX_USER" | cut -d: -f6)
BOX_GROUP=$(id -gn "$BOX_USER")
install -d -o "$BOX_USER" -g "$BOX_GROUP" -m 0700 "$BOX_HOME/.ssh"
install -o "$BOX_USER" -g "$BOX_GROUP" -m 0600 "$KEY.pub" "$BOX_HOME/.ssh/authorized_keys"
sed -e "s/^Port $SSH_PORT\$/Port $BOX_PORT/" -e "s|^PidFile .*|PidFile $BOX_PIDFILE|" \
    -e "s/^AllowUsers .*/AllowUsers $BOX_USER/" "$STATE/sshd_config" >"$STATE/box_sshd_config.new"
box_changed=""
cmp -s "$STATE/box_sshd_config.new" "$STATE/box_sshd_config" || box_changed=1
mv "$STATE/box_sshd_config.new" "$STATE/box_sshd_config"
/usr/sbin/sshd -t -f "$STATE/box_sshd_config" || die "sshd rejects $STATE/box_sshd_config"
[ -n "$box_changed" ] && stop_marked box-sshd
if ! running_from "$BOX_PIDFILE" sshd >/dev/null; then
    /usr/sbin/sshd -f "$STATE/box_sshd_config" -E "$STATE/box_sshd.log" || die "the box's sshd did not start"
    pid=$(await_pidfile "$BOX_PIDFILE" sshd) || die "the box's sshd is not running"
    mark box-sshd "$pid" sshd
fi

ssh_job() {
    ssh -p "$SSH_PORT" -i "$KEY" -o IdentitiesOnly=yes -o BatchMode=yes -o LogLevel=ERROR \
        -o StrictHostKeyChecking=yes -o UserKnownHostsFile="$KNOWN_HOSTS" "$JOB_USER@127.0.0.1" "$@"
}
for _ in $(seq 50); do ssh_job true 2>/dev/null && break; sleep 0.1; done
ssh_job true || die "ssh login as $JOB_USER failed (see $STATE/sshd.log)"

# -- fluksio-worker for the job user -------------------------------------------------------
# The job user cannot read root's pyenv or this checkout's .venv, so the worker gets its own
# virtualenv from the system Python, under $STATE (world-readable), rebuilt when the agent's
# source changes.
VENV=$STATE/worker-venv
source_digest=$(cd "$CHECKOUT" && find fluksio/agent packaging/fluksio-worker/pyproject.toml -name '*.py' -o -name '*.toml' |
    LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
if [ "$(cat "$VENV/.fluksio-source" 2>/dev/null)" != "$source_digest" ]; then
    say "installing fluksio-worker from $CHECKOUT into $VENV"
    [ -x "$VENV/bin/python" ] || /usr/bin/python3 -m venv "$VENV"
    {
        "$VENV/bin/python" -m pip install --upgrade pip &&
            "$VENV/bin/python" -m pip install --force-reinstall --no-cache-dir "$CHECKOUT/packaging/fluksio-worker"
    } >"$STATE/pip.log" 2>&1 || { tail -20 "$STATE/pip.log"; die "installing fluksio-worker failed"; }
    echo "$source_digest" >"$VENV/.fluksio-source"
    chmod -R a+rX "$VENV"
fi
runuser -u "$JOB_USER" -- "$VENV/bin/fluksio-worker" --version >/dev/null ||
    die "$JOB_USER cannot run $VENV/bin/fluksio-worker"

cat >"$STATE/env" <<ENV
LOGIN=$JOB_USER@127.0.0.1
PORT=$SSH_PORT
KEY=$KEY
KNOWN_HOSTS=$KNOWN_HOSTS
WORKER=$VENV/bin/fluksio-worker
PRERUN=export PATH=$VENV/bin:\$PATH
BOX_LOGIN=$BOX_USER@127.0.0.1
BOX_PORT=$BOX_PORT
ENV
chmod 0644 "$STATE/env"
say "Slurm node $NODE ($DECLARED_CPUS cpus declared, $CPUS real, ${REAL_MEM} MB) is idle; login node on 127.0.0.1:$SSH_PORT"
cat "$STATE/env"
