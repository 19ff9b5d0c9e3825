# slurm-accounting.sh: sourced by slurm-up.sh once slurm.conf is written. Slurm's
# accounting, as sites run it: MariaDB on a unix socket only (no TCP), slurmdbd on
# 127.0.0.1, the cluster registered, and the job user in an account of its own. Limits
# are not enforced (no AccountingStorageEnforce), so no test's job is refused for them:
# the limits test makes a QOS of its own and checks that the engine keeps to it.
# Uses say, die, mark, running_from and await_pidfile from slurm-up.sh.

MYSQL_SOCKET=/run/mysqld/mysqld.sock
MYSQL_PIDFILE=/run/mysqld/mysqld.pid
DBD_PIDFILE=$SLURM_RUN/slurmdbd.pid
ACCOUNT=fluksio

install -d -o mysql -g root -m 0755 /run/mysqld
install -d -o mysql -g adm -m 2750 /var/log/mysql
if ! mariadb-admin --socket="$MYSQL_SOCKET" ping >/dev/null 2>&1; then
    [ -d /var/lib/mysql/mysql ] ||
        mariadb-install-db --user=mysql --datadir=/var/lib/mysql >"$STATE/mariadb-install.log" 2>&1 ||
        { tail -20 "$STATE/mariadb-install.log"; die "mariadb-install-db failed"; }
    setsid -f /usr/sbin/mariadbd --user=mysql --skip-networking --socket="$MYSQL_SOCKET" \
        --pid-file="$MYSQL_PIDFILE" --log-error=/var/log/mysql/error.log \
        --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1
    pid=$(await_pidfile "$MYSQL_PIDFILE" mariadbd) ||
        { tail -20 /var/log/mysql/error.log; die "mariadbd is not running"; }
    mark mariadbd "$pid" mariadbd
    for _ in $(seq 150); do mariadb-admin --socket="$MYSQL_SOCKET" ping >/dev/null 2>&1 && break; sleep 0.1; done
    mariadb-admin --socket="$MYSQL_SOCKET" ping >/dev/null || die "mariadb does not answer"
fi
# slurmdbd runs as slurm and logs in through the socket as that user: no password anywhere.
mariadb --socket="$MYSQL_SOCKET" -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED VIA unix_socket;
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';" || die "could not give slurmdbd its database"

cat >"$STATE/slurmdbd.conf.new" <<CONF
$TAG
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
CommunicationParameters=NoInAddrAny
SlurmUser=slurm
LogFile=/var/log/slurm/slurmdbd.log
PidFile=$DBD_PIDFILE
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StorageLoc=slurm_acct_db
CONF
if ! cmp -s "$STATE/slurmdbd.conf.new" /etc/slurm/slurmdbd.conf; then
    install -o slurm -g slurm -m 0600 "$STATE/slurmdbd.conf.new" /etc/slurm/slurmdbd.conf
    stop_marked slurmdbd
fi
rm -f "$STATE/slurmdbd.conf.new"
if ! running_from "$DBD_PIDFILE" slurmdbd >/dev/null; then
    /usr/sbin/slurmdbd || { tail -20 /var/log/slurm/slurmdbd.log; die "slurmdbd did not start"; }
    pid=$(await_pidfile "$DBD_PIDFILE" slurmdbd) || die "slurmdbd is not running"
    mark slurmdbd "$pid" slurmdbd
fi
for _ in $(seq 150); do sacctmgr -nP show cluster format=cluster >/dev/null 2>&1 && break; sleep 0.1; done
sacctmgr -nP show cluster format=cluster 2>/dev/null | grep -qx fluksiotest ||
    sacctmgr -i add cluster fluksiotest >/dev/null || die "sacctmgr could not add the cluster"
sacctmgr -nP show account "$ACCOUNT" format=account 2>/dev/null | grep -qx "$ACCOUNT" ||
    sacctmgr -i add account "$ACCOUNT" cluster=fluksiotest >/dev/null || die "sacctmgr could not add the account"
sacctmgr -nP show user "$JOB_USER" format=user 2>/dev/null | grep -qx "$JOB_USER" ||
    sacctmgr -i add user "$JOB_USER" account="$ACCOUNT" cluster=fluksiotest >/dev/null ||
    die "sacctmgr could not add $JOB_USER"
