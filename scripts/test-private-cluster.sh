#!/usr/bin/env bash
# Proves that, where nothing listens on the Postgres port but initdb/pg_ctl
# exist, the project starts a private cluster and works jobs on it: it picks
# a free port, lets scripts/services.sh start a cluster in a temporary
# directory, migrates, enqueues demo jobs, runs a worker until they are
# completed, checks `jobs list` and `stats`, and stops everything it started.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TRIBUTARY_BIN:-$root/bin/tributary}
[ -x "$bin" ] || { echo "build first: make build" >&2; exit 1; }

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 55432)
dir=$(mktemp -d /tmp/tributary-pg.XXXXXX)
chmod 755 "$dir"
worker_pid=""
cleanup() {
	[ -n "$worker_pid" ] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null || true
	TRIBUTARY_PG_DIR=$dir/pg "$root/scripts/services.sh" stop-pg || true
	rm -rf "$dir"
}
trap cleanup EXIT

fail() { echo "private-cluster test: FAIL: $*" >&2; exit 1; }

echo "private-cluster test: port $port, directory $dir"
env_out=$(env -u DATABASE_URL TRIBUTARY_PG_PORT=$port TRIBUTARY_PG_DIR=$dir/pg "$root/scripts/services.sh" env run)
eval "$env_out"
case "$DATABASE_URL" in *":$port/"*) ;; *) fail "DATABASE_URL $DATABASE_URL does not use port $port" ;; esac
[ -f "$dir/pg/data/PG_VERSION" ] || fail "no private cluster was created"

"$bin" migrate up >/dev/null
for i in 1 2 3; do "$bin" enqueue demo.noop '{}' >/dev/null; done
"$bin" enqueue demo.fail '{"times":1}' >/dev/null
"$bin" worker --queues default=10,events=10 >"$dir/worker.log" 2>&1 &
worker_pid=$!
deadline=$((SECONDS + 60))
until [ "$("$bin" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["by_state"].get("completed",0))')" = 4 ]; do
	[ $SECONDS -lt $deadline ] || { cat "$dir/worker.log" >&2; fail "jobs did not complete within 60s"; }
	kill -0 "$worker_pid" 2>/dev/null || { cat "$dir/worker.log" >&2; fail "the worker exited"; }
	sleep 0.2
done
kill -TERM "$worker_pid"
wait "$worker_pid" || fail "worker exited with $? after SIGTERM"
worker_pid=""
# Outputs read whole first: grep -q's early exit would SIGPIPE the writer.
listed=$("$bin" jobs list --state completed) || fail "jobs list failed"
grep -q demo.fail <<<"$listed" || fail "jobs list does not show the completed demo.fail job: $listed"
stats=$("$bin" stats) || fail "stats failed"
grep -q "completed  4" <<<"$stats" || fail "stats does not show 4 completed jobs: $stats"
echo "private-cluster test: ok (cluster on 127.0.0.1:$port worked 4 demo jobs)"
