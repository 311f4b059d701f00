#!/usr/bin/env bash
# Finds or starts the services tributary needs and prints shell exports for
# them, to be used as: eval "$(scripts/services.sh env [run|test])".
#
# PostgreSQL: DATABASE_URL if set; else a server on 127.0.0.1:$TRIBUTARY_PG_PORT
# (default 5432); else a private cluster under $TRIBUTARY_PG_DIR (default
# .tributary/pg) started with the machine's initdb/pg_ctl on that port.
# RabbitMQ: AMQP_URL if set; else 127.0.0.1:5672; else rabbitmq-server if
# installed; else none (the AMQP bridge stays off; AMQP tests fail).
#
#   scripts/services.sh env run    exports DATABASE_URL (database tributary, created if missing:
#                                  never the postgres maintenance database)
#   scripts/services.sh env test   exports TEST_DATABASE_URL (database test)
#   scripts/services.sh stop-pg    stops the private cluster, if this script started one
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
pg_port=${TRIBUTARY_PG_PORT:-5432}
pg_dir=${TRIBUTARY_PG_DIR:-$root/.tributary/pg}

say() { printf 'services: %s\n' "$*" >&2; }
die() { printf 'services: %s\n' "$*" >&2; exit 1; }

listening() { # host port
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

find_pg_bin() { # name
	local name=$1 dir
	if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
	for dir in /usr/lib/postgresql/*/bin; do
		[ -x "$dir/$name" ] && { echo "$dir/$name"; return 0; }
	done
	return 1
}

# as_pg_user runs a command as an unprivileged user when we are root:
# initdb and postgres refuse to run as root.
as_pg_user() {
	if [ "$(id -u)" = 0 ]; then
		id postgres >/dev/null 2>&1 || die "running as root and there is no 'postgres' user to run the private PostgreSQL cluster as; create one (useradd -r postgres) or run as a normal user"
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

start_private_pg() {
	local initdb pg_ctl
	initdb=$(find_pg_bin initdb) && pg_ctl=$(find_pg_bin pg_ctl) ||
		die "nothing listens on 127.0.0.1:$pg_port and initdb/pg_ctl are not installed: install PostgreSQL (apt-get install postgresql) or set DATABASE_URL"
	mkdir -p "$pg_dir"
	if [ "$(id -u)" = 0 ]; then chown postgres: "$pg_dir"; fi
	chmod 700 "$pg_dir"
	if [ ! -f "$pg_dir/data/PG_VERSION" ]; then
		say "creating a private PostgreSQL cluster in $pg_dir/data"
		as_pg_user "$initdb" -D "$pg_dir/data" -U postgres --auth=trust -E UTF8 >"$pg_dir/initdb.log" 2>&1 ||
			die "initdb failed; see $pg_dir/initdb.log"
	fi
	say "starting the private PostgreSQL cluster on 127.0.0.1:$pg_port"
	as_pg_user "$pg_ctl" -D "$pg_dir/data" -l "$pg_dir/server.log" -w -t 60 \
		-o "-p $pg_port -c listen_addresses=127.0.0.1 -k $pg_dir -c max_connections=200 -c fsync=off" start >/dev/null ||
		die "the private PostgreSQL cluster did not start; see $pg_dir/server.log"
	echo "$pg_port" >"$pg_dir/port"
}

ensure_db() { # url-without-db db
	local base=$1 db=$2
	if ! psql "$base/$db?sslmode=disable" -Atqc 'select 1' >/dev/null 2>&1; then
		if psql "$base/postgres?sslmode=disable" -Atqc "create database \"$db\"" >/dev/null 2>&1; then
			say "created database $db on ${base#*@}"
		fi
	fi
}

pg_url() { # db
	local db=$1
	if [ -n "${DATABASE_URL:-}" ]; then
		echo "$DATABASE_URL"
		return
	fi
	if ! listening 127.0.0.1 "$pg_port"; then
		start_private_pg
	fi
	local base="postgres://postgres@127.0.0.1:$pg_port"
	if command -v psql >/dev/null 2>&1; then
		ensure_db "$base" "$db"
	else
		say "psql is not installed, so database $db is not created here: create it, or set DATABASE_URL"
	fi
	echo "$base/$db?sslmode=disable"
}

amqp_url() {
	if [ -n "${AMQP_URL:-}" ]; then echo "$AMQP_URL"; return; fi
	if listening 127.0.0.1 5672; then echo "amqp://guest:guest@127.0.0.1:5672/"; return; fi
	if command -v rabbitmq-server >/dev/null 2>&1; then
		say "starting rabbitmq-server"
		rabbitmq-server -detached >/dev/null 2>&1 || true
		for _ in $(seq 1 60); do
			listening 127.0.0.1 5672 && { echo "amqp://guest:guest@127.0.0.1:5672/"; return; }
			sleep 1
		done
	fi
	echo ""
}

case "${1:-}" in
env)
	mode=${2:-run}
	case "$mode" in
	run)
		url=$(pg_url tributary)
		[ -z "${DATABASE_URL:-}" ] && say "using database tributary on 127.0.0.1:$pg_port (set DATABASE_URL to use another)"
		echo "export DATABASE_URL='$url'"
		url=$(amqp_url)
		[ -n "$url" ] && echo "export AMQP_URL='$url'"
		;;
	test)
		url=$(pg_url test)
		echo "export TEST_DATABASE_URL='$url'"
		amqp=$(amqp_url)
		if [ -z "$amqp" ]; then
			die "RabbitMQ is not reachable on 127.0.0.1:5672 and rabbitmq-server is not installed: install it (apt-get install rabbitmq-server) or set AMQP_URL"
		fi
		echo "export AMQP_URL='$amqp'"
		;;
	*) die "unknown mode '$mode': want run or test" ;;
	esac
	;;
stop-pg)
	[ -f "$pg_dir/data/PG_VERSION" ] || exit 0
	pg_ctl=$(find_pg_bin pg_ctl) || exit 0
	as_pg_user "$pg_ctl" -D "$pg_dir/data" -m fast -w stop >/dev/null 2>&1 || true
	;;
*)
	die "usage: scripts/services.sh env [run|test] | stop-pg"
	;;
esac
