#!/usr/bin/env bash
# Make sure a Redis answers at RAGKB_REDIS__URL's host and port: use a running one, else start one,
# installing redis-server from the system's packages when it is absent.
# A Redis started here keeps its queue across restarts (append-only file in var/redis, fsync every second), so
# queued ingests survive it. A running one is used as it is, never reconfigured: if it persists nothing, a
# restart loses the queued messages, and the worker's sweeper sends the pending documents again as soon as it
# sees the new Redis.
set -euo pipefail
url="${RAGKB_REDIS__URL:-redis://127.0.0.1:6379/0}"
hostport="${url#*://}"; hostport="${hostport%%/*}"; hostport="${hostport##*@}"
host="${hostport%%:*}"; port="${hostport##*:}"; [ "$port" = "$host" ] && port=6379

answers() { (exec 3<>"/dev/tcp/$host/$port" && printf 'PING\r\n' >&3 && timeout 2 head -c 5 <&3 | grep -q PONG) 2>/dev/null; }

if answers; then echo "redis: answering at $host:$port"; exit 0; fi
if ! command -v redis-server >/dev/null; then
  echo "redis: not installed; installing redis-server from the system packages"
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq redis-server >/dev/null; fi
fi
mkdir -p var/redis
redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly yes --appendfsync everysec \
  --dir "$PWD/var/redis" --logfile "$PWD/var/redis/redis.log"
for _ in $(seq 1 50); do answers && { echo "redis: started at $host:$port"; exit 0; }; sleep 0.1; done
echo "redis: could not start one at $host:$port" >&2; exit 1
