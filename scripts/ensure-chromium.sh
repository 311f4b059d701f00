#!/usr/bin/env bash
# Finds Debian's chromium for the dashboard's browser test, or installs it
# (as root, through apt) on a fresh machine; otherwise says in one sentence
# what to install. `make test` runs it before the tests, so the README's
# command needs no set-up of its own.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
	exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
	echo "tests: installing Debian's chromium for the dashboard's browser test" >&2
	if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 &&
		{ command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; }; then
		exit 0
	fi
fi
echo "tests: the dashboard's browser test needs Debian's chromium: install it with 'apt-get install chromium' (as root)" >&2
exit 1
