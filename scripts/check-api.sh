#!/usr/bin/env bash
# Compares the exported API of the public packages with the listing
# committed in api/ (written by `make api`), so that a change to the public
# API is made on purpose and shows in review. Run by `make test`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

(cd "$root" && ${GO:-go} run ./scripts/apilist -o "$tmp/from-code")
mkdir -p "$tmp/committed"
cp "$root"/api/*.txt "$tmp/committed/" 2>/dev/null || true
if ! (cd "$tmp" && diff -ruN committed from-code) >"$tmp/diff"; then
	echo "the exported API changed: run \`make api\` and add the change to CHANGELOG.md"
	cat "$tmp/diff"
	exit 1
fi
