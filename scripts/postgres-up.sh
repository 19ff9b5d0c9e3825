#!/usr/bin/env bash
# postgres-up.sh: a PostgreSQL cluster of its own, on 127.0.0.1 and a port of its own, for
# the tests of an engine on PostgreSQL (issue 67) and for trying one on a laptop.
#
# Idempotent: installs Debian's postgresql if it is missing (no service of the package is
# started), makes the cluster once in $STATE/data (run by the postgres user, as Debian's
# own clusters are), starts it only if it is not running, and makes a role that may create
# databases, with a password kept only in a pgpass file (mode 0600): never in argv, never
# in the environment. Ends by printing the facts a test needs, one KEY=value per line:
#   URL=postgresql://USER@127.0.0.1:PORT/DB   PGPASSFILE=<the role's password file>
# The same lines are kept in $STATE/env for the test suite. Run as root.
#
#   FLUKSIO_POSTGRES_STATE  the cluster, its log, the password file, env  [/var/lib/fluksio-postgres]
#   FLUKSIO_POSTGRES_PORT   its port on 127.0.0.1                          [55432]
set -euo pipefail

STATE=${FLUKSIO_POSTGRES_STATE:-/var/lib/fluksio-postgres}
PORT=${FLUKSIO_POSTGRES_PORT:-55432}
CHECKOUT=$(cd "$(dirname "$0")/.." && pwd)
ROLE=fluksio
DATABASE=fluksio

say() { printf '[postgres-up] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (it installs packages and runs the cluster as postgres)"

bindir() { find /usr/lib/postgresql -maxdepth 3 -path '*/bin/initdb' 2>/dev/null | sort -V | tail -1 | xargs -r dirname; }
if [ -z "$(bindir)" ] || ! id postgres >/dev/null 2>&1; then
    say "installing Debian's postgresql"
    bash "$CHECKOUT/scripts/apt-install.sh" postgresql
fi
BIN=$(bindir)
[ -n "$BIN" ] || die "no initdb under /usr/lib/postgresql after installing postgresql"
as_postgres() { runuser -u postgres -- "$@"; }

install -d -m 0700 -o postgres -g postgres "$STATE" "$STATE/run"
if [ ! -s "$STATE/data/PG_VERSION" ]; then
    say "making a cluster in $STATE/data"
    # Local connections (the socket in $STATE/run) as the postgres user need no password;
    # every TCP connection needs one, checked with SCRAM.
    as_postgres "$BIN/initdb" -D "$STATE/data" --auth-local=peer --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >/dev/null
fi

if ! as_postgres "$BIN/pg_ctl" -D "$STATE/data" status >/dev/null 2>&1; then
    say "starting it on 127.0.0.1:$PORT"
    as_postgres "$BIN/pg_ctl" -D "$STATE/data" -l "$STATE/log" -w -t 60 start -o \
        "-c listen_addresses=127.0.0.1 -c port=$PORT -c unix_socket_directories=$STATE/run" \
        >/dev/null || die "the cluster did not start: see $STATE/log"
fi

psql_admin() { as_postgres "$BIN/psql" -h "$STATE/run" -p "$PORT" -d postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
PASSFILE=$STATE/pgpass
if [ ! -s "$PASSFILE" ] || [ -z "$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" ]; then
    # The password goes to psql on its standard input, never on a command line.
    password=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
    umask 077
    printf '127.0.0.1:%s:*:%s:%s\n' "$PORT" "$ROLE" "$password" >"$PASSFILE.new"
    mv "$PASSFILE.new" "$PASSFILE"
    exists=$(psql_admin -c "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")
    verb=$([ -n "$exists" ] && echo ALTER || echo CREATE)
    printf "%s ROLE %s LOGIN CREATEDB PASSWORD '%s';\n" "$verb" "$ROLE" "$password" | psql_admin -f -
fi
if [ -z "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$DATABASE'")" ]; then
    psql_admin -c "CREATE DATABASE $DATABASE OWNER $ROLE"
fi

facts="URL=postgresql://$ROLE@127.0.0.1:$PORT/$DATABASE
PGPASSFILE=$PASSFILE"
printf '%s\n' "$facts" >"$STATE/env"
printf '%s\n' "$facts"
