#!/usr/bin/env bash
# The metadata tests run against PostgreSQL too (RAGKB_TEST_POSTGRES_URL, default 127.0.0.1:5432/test).
# Start the machine's cluster if it is installed but stopped; the tests skip PostgreSQL only when none exists.
set -uo pipefail
answers() { (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null; }
if answers; then echo "postgres: answering at 127.0.0.1:5432"; exit 0; fi
if command -v pg_ctlcluster >/dev/null && [ -d /etc/postgresql ]; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start && sleep 1
  answers && { echo "postgres: started"; exit 0; }
fi
echo "postgres: none available; PostgreSQL variants of the metadata tests will be skipped" >&2
exit 0
