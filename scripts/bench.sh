#!/usr/bin/env bash
# make bench: runs every `tributary bench` subcommand this build has, each
# printing tributary's figure beside a baseline measured in the same run.
# The figures, the machine and these commands are recorded in
# docs/BENCHMARKS.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin/tributary
echo "machine: $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr)"
echo "postgres: ${DATABASE_URL%%\?*}"
run() { echo; echo "\$ tributary $*"; "$bin" "$@"; }
run bench jobs -n "${BENCH_JOBS_N:-100000}" --rounds "${BENCH_ROUNDS:-5}"
run bench events -n "${BENCH_EVENTS_N:-100000}" --no-notify
for sub in events batch amqp cleanup dashboard workflows; do
	if "$bin" bench "$sub" --help >/dev/null 2>&1; then
		run bench "$sub"
	fi
done
