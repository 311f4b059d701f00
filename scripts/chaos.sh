#!/usr/bin/env bash
# make chaos: the long fault-injection runs that stay out of `make test`.
# Their figures are recorded in docs/RELIABILITY.md.
set -uo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
run() {
	echo "\$ $*"
	"$@" >"$log" 2>&1
	local rc=$?
	grep -E '^(=== RUN|--- |PASS|FAIL|ok|chaos:|fresh-clone test:|go-install test:|tests:|\s+\w+_test\.go:[0-9]+:)' "$log"
	if [ "$rc" != 0 ]; then
		status=1
		tail -50 "$log"
		# The whole output (the workers' logs a failed run prints are not
		# in the lines above) stays for reading.
		kept=$(mktemp "${TMPDIR:-/tmp}/tributary-chaos-failed.XXXXXX")
		cp "$log" "$kept"
		echo "chaos: the whole output of the failed command is in $kept"
	fi
}
# Tests built only with the chaos tag (batch: a worker killed after its upload;
# workflows: 1,000 diamonds with a replica SIGKILLed five times; 300
# demo.approval workflows signalled while a worker is SIGKILLed five times,
# TestChaosApprovalSIGKILL in cmd/tributary/internal/demoworkflows; limits:
# 6,500 jobs under a per-key and a rate limit with a worker SIGKILLed ten
# times, TestChaosLimitsSIGKILL). One package at a time
# (-p 1): each run loads both cores and holds up to about 65 of Postgres's
# 100 connections, so two side by side starve each other (the SIGKILL run
# failed once in make chaos on a worker's exit at SIGTERM and passed alone).
run go test -tags chaos -race -p 1 -count=1 -timeout 90m -run Chaos -v ./...
# AMQP: 20,000 messages with the bridge's connections force-closed repeatedly.
run env AMQP_FAULT_LONG=1 go test -race -count=1 -timeout 30m -run 'Fault' -v ./amqpbridge/
# Events: 10,000 events over 200 aggregates on three replica processes.
run env EVENTS_REPLICA_N=10000 go test -race -count=1 -timeout 30m -run 'TestReplicas' -v ./jobs/events/
# A fresh clone's `make test` installs what it needs (chromium) by itself.
run scripts/test-fresh-clone.sh
# `go install ...@COMMIT` works from the module alone, into an empty GOPATH.
run scripts/test-go-install.sh
exit $status
