#!/usr/bin/env bash
# make chaos: the long fault-injection runs that stay out of `make test`.
# Each is a Go test gated by TRIBUTARY_CHAOS=1; their figures are recorded in
# docs/RELIABILITY.md.
set -euo pipefail
cd "$(dirname "$0")/.."
TRIBUTARY_CHAOS=1 go test -race -count=1 -timeout 60m -run 'Chaos|Fault' -v ./... 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|chaos:)' || true
