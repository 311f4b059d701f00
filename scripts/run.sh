#!/usr/bin/env bash
# make run: find or start the services, migrate, and run a worker with the
# dashboard and a demo producer until Ctrl-C.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/bin/tributary
eval "$("$root/scripts/services.sh" env run)"
"$bin" migrate up
addr=${TRIBUTARY_HTTP_ADDR:-127.0.0.1:8080}
cat <<MSG

tributary is running demo jobs against ${DATABASE_URL%%\?*}
  (its own database, not the server's postgres one, unless DATABASE_URL says so)
  in another terminal:   bin/tributary jobs list      bin/tributary stats
  dashboard (if built):  http://$addr/
  stop with Ctrl-C (running jobs get TRIBUTARY_SHUTDOWN_TIMEOUT to finish)

MSG
exec "$bin" worker --http "$addr" --demo
