"""Redis databases for tests, one per holder: the e2e stack's worker consumes every task in its database, so a
test that inspects a queue must never share a database with a running stack (or another test run)."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

import redis

HOST, PORT = "127.0.0.1", 6379
TEST_DATABASES = range(1, 16)  # database 0 is a developer's `make run`
CLAIM_KEY = "ragkb:test-claim"
# A claim outlives any test run; a run that was killed leaves its database claimed until then.
CLAIM_TTL_S = 6 * 3600


@contextmanager
def private_redis_db() -> Iterator[redis.Redis]:
    """A connection to a database (1-15) that nobody else holds, emptied; released (emptied) afterwards.

    The claim is a key set only where it does not exist (SET NX), so two holders can never take the same
    database, whichever process or test run they are in. Redis must answer: a caller that can do without it
    checks first (tests/integration/test_kb_deletion.py skips)."""
    owner = f"pid {os.getpid()}"
    for db in random.sample(list(TEST_DATABASES), len(TEST_DATABASES)):
        connection = redis.Redis(host=HOST, port=PORT, db=db)
        if connection.set(CLAIM_KEY, owner, nx=True, ex=CLAIM_TTL_S):
            break
        connection.close()
    else:
        raise RuntimeError(f"every Redis test database {TEST_DATABASES.start}-{TEST_DATABASES.stop - 1} is claimed")
    connection.flushdb()
    connection.set(CLAIM_KEY, owner, ex=CLAIM_TTL_S)
    try:
        yield connection
    finally:
        connection.flushdb()
        connection.close()
