#!/usr/bin/env bash
# `make run`: a fresh engine on 127.0.0.1:8080 (embedded SQLite under .fluksio-run/), a
# local fluksio-worker attached to it with a freshly minted token, the example flow from
# examples/hello (one node bound to that worker), one run of it followed live; then both
# keep running until Ctrl-C stops the worker and the engine. FLUKSIO_DEMO_ONESHOT=1 stops after the run (the tests use it),
# FLUKSIO_DEMO_PORT and FLUKSIO_DEMO_DIR move it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin
run_dir=${FLUKSIO_DEMO_DIR:-.fluksio-run}
port=${FLUKSIO_DEMO_PORT:-8080}
rm -rf "$run_dir"
mkdir -p "$run_dir"
umask 077

export FLUKSIO_SUPERUSER=admin
FLUKSIO_SUPERUSER_PASSWORD=$("$bin/python" -c 'import secrets; print(secrets.token_urlsafe(18))')
export FLUKSIO_SUPERUSER_PASSWORD
printf '%s\n' "$FLUKSIO_SUPERUSER_PASSWORD" > "$run_dir/password"

"$bin/fluksio" serve --host 127.0.0.1 --port "$port" --data-dir "$run_dir/data" \
  > "$run_dir/engine.out" 2> "$run_dir/engine.log" &
engine=$!
worker=""
stop() {
  if [ -n "$worker" ]; then kill -TERM "$worker" 2>/dev/null || true; wait "$worker" 2>/dev/null || true; fi
  kill -TERM "$engine" 2>/dev/null || true
  wait "$engine" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT TERM

for _ in $(seq 400); do  # up to 20 s for the engine to listen
  [ -s "$run_dir/data/engine.json" ] && break
  kill -0 "$engine" 2>/dev/null || { cat "$run_dir/engine.log" >&2; exit 1; }
  sleep 0.05
done
[ -s "$run_dir/data/engine.json" ] || { echo "the engine did not start" >&2; exit 1; }

export FLUKSIO_DATA_DIR="$run_dir/data" FLUKSIO_USERNAME=admin
export FLUKSIO_PASSWORD="$FLUKSIO_SUPERUSER_PASSWORD"
url=$("$bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["url"])' \
  "$run_dir/data/engine.json")

echo "Engine: $url (log: $run_dir/engine.log)"
# A worker on this machine, labelled "local"; its token goes through the environment only.
FLUKSIO_WORKER_TOKEN=$("$bin/fluksio" tokens mint local-box --labels local 2>/dev/null)
export FLUKSIO_WORKER_TOKEN
"$bin/fluksio-worker" --url "${url/http:/ws:}/api/v1/workers/attach" --labels local \
  --name demo --parallel 2 > "$run_dir/worker.log" 2>&1 &
worker=$!
unset FLUKSIO_WORKER_TOKEN
echo "Worker: local-box/demo (log: $run_dir/worker.log)"
"$bin/fluksio" flows put examples/hello/flow.json
status=0
"$bin/fluksio" runs start hello --param n=5 --follow || status=$?

if [ -n "${FLUKSIO_DEMO_ONESHOT:-}" ]; then
  exit "$status"
fi
echo
echo "The engine keeps running at $url/api/v1 with the worker attached; user admin,"
echo "password in $run_dir/password."
echo "Workers screen: $url/workers (attached hosts, resources, waiting calls, tokens)"
echo "Try: FLUKSIO_DATA_DIR=$run_dir/data FLUKSIO_USERNAME=admin FLUKSIO_PASSWORD=\$(cat $run_dir/password) $bin/fluksio runs start hello --follow"
echo "Ctrl-C stops it."
wait "$engine"
