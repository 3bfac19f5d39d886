"""PostgreSQL SIGKILLed under load and started again (crash recovery), on a stack whose metadata database is a
PostgreSQL cluster of this test's own: the shared one on 5432 is never touched. The same checks as every fault
(tests/faults/test_faults.py): documents done or failed with a reason, the index consistent, no chunk twice,
every answer right or a 503 with Retry-After."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragkb_cli.stack import free_port
from tests.faults.conftest import FaultStack, fault_stack
from tests.faults.test_faults import run_fault
from tests.faults.workload import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.full_fault_suite]
POSTGRES_BIN = next((Path(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None)


class PostgresServer:
    """A throwaway cluster (trust authentication, 127.0.0.1 only), run as the `postgres` user when this is root
    (PostgreSQL refuses to run as root)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self._data = workdir / "postgres"
        self._log = workdir / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def init(self) -> None:
        self._data.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self._data, "postgres", "postgres")
            self._log.touch()
            shutil.chown(self._log, "postgres", "postgres")
        self._run("initdb", "-D", str(self._data), "-U", "postgres", "--auth=trust", "-E", "UTF8")

    def start(self) -> None:
        options = f"-p {self.port} -k {self._data} -c listen_addresses=127.0.0.1"
        # Right after a kill the old backends may still hold the shared memory for a moment: try again.
        for _ in range(20):
            if self._run(
                "pg_ctl", "-D", str(self._data), "-o", options, "-l", str(self._log), "-w", "start", check=False
            ):
                return
            time.sleep(0.5)
        raise RuntimeError(f"postgres did not start; log:\n{self._log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would (its backends notice and exit)."""
        pid = int((self._data / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self._data), "-m", "immediate", "stop", check=False)

    def _run(self, program: str, *args: str, check: bool = True) -> bool:
        assert POSTGRES_BIN is not None
        command = [str(POSTGRES_BIN / program), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stderr[-2000:]}")
        return done.returncode == 0


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    if POSTGRES_BIN is None:
        pytest.skip("no PostgreSQL installed (/usr/lib/postgresql/*/bin)")
    # Not under pytest's temporary folders: their parents are private to this user, and the cluster runs as
    # the postgres user.
    workdir = Path(tempfile.mkdtemp(prefix="ragkb-faults-pg-"))
    workdir.chmod(0o777)
    server = PostgresServer(workdir)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, postgres: PostgresServer) -> Iterator[FaultStack]:
    yield from fault_stack(tmp_path_factory.mktemp("ragkb-faults-pg"), RAGKB_DATABASE__URL=postgres.url)


def test_postgres_killed_and_recovered(stack: FaultStack, kb: str, postgres: PostgresServer) -> None:
    def restart_postgres() -> None:
        postgres.kill()
        time.sleep(3)
        postgres.start()
        wait_until(stack.ready_now, 120, "the api ready with the database back")

    tally = run_fault(stack, kb, "PostgreSQL SIGKILL, crash recovery", restart_postgres)
    assert tally.outcomes["search correct"] > 0
