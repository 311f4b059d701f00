#!/usr/bin/env bash
# Proves `make run` end to end: runs scripts/run.sh (what `make run` runs)
# on a throw-away schema until its demo producer's jobs have been worked,
# checks that `tributary jobs list` and `tributary stats` show them, stops it
# with SIGTERM and expects exit 0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin/tributary
[ -x "$bin" ] || { echo "build first: make build" >&2; exit 1; }
eval "$("$root/scripts/services.sh" env run)"
export TRIBUTARY_SCHEMA=run_smoke_$$
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export TRIBUTARY_HTTP_ADDR=127.0.0.1:$port
log=$(mktemp)
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	psql "$DATABASE_URL" -qc "drop schema if exists $TRIBUTARY_SCHEMA cascade" >/dev/null 2>&1 || true
	rm -f "$log"
}
trap cleanup EXIT
fail() { echo "make-run test: FAIL: $*" >&2; cat "$log" >&2; exit 1; }

"$root/scripts/run.sh" >"$log" 2>&1 &
pid=$!
deadline=$((SECONDS + 90))
completed=0
while :; do
	completed=$("$bin" stats --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["by_state"].get("completed",0))' 2>/dev/null || echo 0)
	[ "$completed" -ge 5 ] && break
	[ $SECONDS -lt $deadline ] || fail "fewer than 5 jobs completed within 90s"
	kill -0 "$pid" 2>/dev/null || fail "make run exited early"
	sleep 0.5
done
# Each output is read whole before grep looks at it: grep -q stops at the
# first match, and under pipefail the writer's SIGPIPE would fail the check.
listed=$("$bin" jobs list --state completed --kind demo.noop,demo.sleep,demo.fail) || fail "jobs list failed"
grep -q 'demo\.' <<<"$listed" || fail "jobs list shows no completed demo job: $listed"
stats=$("$bin" stats) || fail "stats failed"
grep -q '^  completed' <<<"$stats" || fail "stats shows no completed jobs: $stats"
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
pid=""
[ "$code" = 0 ] || fail "worker exited with $code after SIGTERM"
echo "make-run test: ok ($completed jobs completed, demo jobs among them in jobs list, stats shows them, clean exit on SIGTERM)"
