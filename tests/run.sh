#!/usr/bin/env bash
# The whole suite (`make test`) as two pytest runs at the same time: tests/e2e with tests/faults, and tests/unit
# with tests/integration beside them.
#
# Why two: the e2e and fault tests spend most of their time waiting on real processes (a stack starting, a
# killed worker's lease running out, a retriever call timing out; the load stays near 1.2 of 2 cores), while
# the unit and integration tests are CPU work in the test process. Serially the suite took 23 min on this 2-core
# machine (2026-12-07), past the 20 min CI budget; side by side the waits of the one are the CPU time of the other.
# They share nothing that needs an order: each stack and each queue test has its own Redis database
# (tests/support/redis_db.py), free ports, and its own temporary folders; only tests/integration uses the
# PostgreSQL database `test`.
#
# The second run's output is kept in var/test-unit-integration.log and printed once both have ended. The exit
# status is the e2e run's when it failed, the other run's otherwise: 0 only when both passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
LOG=var/test-unit-integration.log
mkdir -p var

"$PY" -m pytest tests/unit tests/integration -q "$@" >"$LOG" 2>&1 &
beside=$!
"$PY" -m pytest tests/e2e tests/faults -q "$@"
waiting_status=$?
wait "$beside"
cpu_status=$?

echo
echo "== tests/unit and tests/integration, run beside the above (output in $LOG) =="
cat "$LOG"
if ((waiting_status != 0)); then exit "$waiting_status"; fi
exit "$cpu_status"
