#!/usr/bin/env bash
# Proves that the README's `make test` needs no set-up of its own: clones
# this repository's HEAD into a temporary directory, removes Debian's
# chromium (so it is on no PATH), and runs `make test` there under CI=true,
# where the browser test itself never installs anything. make test must
# install chromium and pass. Part of `make chaos` (it reinstalls a browser
# and runs the whole suite once more); needs root and apt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
say() { printf 'fresh-clone test: %s\n' "$*"; }
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
	say "skipped: removing and reinstalling chromium needs root and apt-get"
	exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q "$root" "$tmp/tributary"
say "cloned $(git -C "$root" rev-parse --short HEAD) into $tmp/tributary"
if dpkg -s chromium >/dev/null 2>&1; then
	say "removing chromium"
	DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq chromium >/dev/null
fi
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
	say "FAIL: chromium is still installed"
	exit 1
fi
say "chromium is on no PATH; running make test in the clone with CI=true"
start=$SECONDS
(cd "$tmp/tributary" && CI=true make test) >"$tmp/make-test.log" 2>&1 || {
	tail -60 "$tmp/make-test.log"
	say "FAIL: make test failed in the fresh clone"
	exit 1
}
grep -E '^(ok|FAIL|tests:|private-cluster test:|make-run test:)' "$tmp/make-test.log" || true
command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || { say "FAIL: make test passed but chromium is not installed"; exit 1; }
grep -q -- '--- PASS: TestBrowser' "$tmp/make-test.log" || grep -q '^ok.*tributary/dashboard' "$tmp/make-test.log" || { say "FAIL: the dashboard's tests did not run"; exit 1; }
say "ok: make test installed chromium and passed in $((SECONDS - start)) s"
