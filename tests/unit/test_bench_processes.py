"""bench/processes.py on real processes: a stand-in launcher whose children carry the services' module names
in their command lines, one of them listening on a port, is found from that port and sampled."""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")

# A launcher that starts an "api" listening on a free port (printed) and a "worker", as deploy/launcher.py does.
LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys
    api = (
        "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen();"
        "print(s.getsockname()[1], flush=True); time.sleep(120)"
    )
    worker = "import time; block = b'x' * (64 * 2**20); print('ready', flush=True); time.sleep(120)"
    # The worker holds its block (pages written, so resident) before the api tells the test its port.
    worker_process = subprocess.Popen([sys.executable, "-c", worker, "ragkb_worker"], stdout=subprocess.PIPE)
    worker_process.stdout.readline()
    children = [worker_process, subprocess.Popen([sys.executable, "-c", api, "ragkb_api"], stdout=sys.stdout)]
    for child in children:
        child.wait()
    """
)


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("processes")


@pytest.fixture
def stack() -> Iterator[tuple[int, subprocess.Popen[str]]]:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert launcher.stdout is not None
    port = int(launcher.stdout.readline())
    yield port, launcher
    os.killpg(launcher.pid, 9)
    launcher.wait()
    launcher.stdout.close()


def test_the_stack_is_found_from_its_api_port_and_each_process_sampled(
    processes: ModuleType, stack: tuple[int, subprocess.Popen[str]]
) -> None:
    port, launcher = stack
    roles = processes.stack_processes(port)
    assert sorted(roles.values()) == ["ragkb_api", "ragkb_worker"]
    assert launcher.pid not in roles

    memory = processes.ProcessMemory(port, interval_s=0.05)
    assert memory.unavailable is None
    memory.start()
    result = memory.stop()
    worker = next(row for row in result["processes"] if row["role"] == "ragkb_worker")
    assert worker["rss_mb_peak"] >= 64  # the 64 MiB block it holds
    assert worker["rss_mb_start"] <= worker["rss_mb_peak"] and worker["rss_mb_end"] <= worker["rss_mb_peak"]
    assert set(result["pss_mb_peak_by_role"]) == {"ragkb_api", "ragkb_worker"}
    assert set(result["cpu_s_by_role"]) == {"ragkb_api", "ragkb_worker"} and worker["cpu_s"] >= 0
    table = processes.memory_table(result)
    assert table.splitlines()[0].startswith("| process | pid |") and len(table.splitlines()) == 4


def test_cpu_seconds_count_what_a_process_used(processes: ModuleType) -> None:
    before = processes.cpu_seconds(os.getpid())
    busy_until = time.process_time() + 0.3
    while time.process_time() < busy_until:
        pass
    assert processes.cpu_seconds(os.getpid()) - before >= 0.25


def test_a_port_nobody_listens_on_is_said_not_guessed(processes: ModuleType) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, not listening
    memory = processes.ProcessMemory(port)
    assert memory.unavailable == f"no ragkb process listens on port {port} on this machine"
    memory.start()
    assert memory.stop() == {"unavailable": memory.unavailable}
    assert processes.memory_table(memory.stop()).startswith("process memory: not measured (no ragkb process")


def test_a_listening_socket_of_this_process_is_found(processes: ModuleType) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert processes.listening_pid(server.getsockname()[1]) == os.getpid()
