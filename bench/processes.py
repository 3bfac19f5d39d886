"""Memory of each process of the ragkb stack a benchmark talks to, sampled from /proc while it runs.

The stack is found from its API's port: the process listening on it, then every process under the same parent
(`deploy/launcher.py` starts api, retriever and worker as its children; Celery forks the worker's task
processes under it). Each process is sampled every `interval_s`: RSS (resident memory, counting pages it
shares) and PSS (its proportional share of those pages: PSS adds up across processes, RSS does not — the
worker's forked task processes share most of their model pages with each other).

RSS is read every `interval_s` and PSS only every `pss_interval_s` (and at the start and the end). Reading PSS
makes the kernel walk every page of the process: on the 2-core bench machine one round over a stack holding
two model copies took 46–68 ms of CPU, 3.4 % of the machine at one round a second, which an ingest benchmark
charged to the pipeline it measures. PSS moves slowly (a model is loaded once), RSS is cheap to read.

Linux only, and only for a stack on this machine; anywhere else `ProcessMemory.unavailable` says why and the
benchmark reports no memory rather than a wrong one.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROC = Path("/proc")
LISTEN = "0A"  # the TCP state column of /proc/net/tcp for a listening socket
ROLES = ("ragkb_api", "ragkb_retriever", "ragkb_worker")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Sample:
    rss_mb: float
    pss_mb: float | None
    cpu_s: float | None  # user + system CPU seconds since the process started


@dataclass
class ProcessTrace:
    pid: int
    role: str
    samples: list[Sample] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        pss = [s.pss_mb for s in self.samples if s.pss_mb is not None]
        return {
            "pid": self.pid,
            "role": self.role,
            "rss_mb_start": round(self.samples[0].rss_mb, 1),
            "rss_mb_peak": round(max(s.rss_mb for s in self.samples), 1),
            "rss_mb_end": round(self.samples[-1].rss_mb, 1),
            "pss_mb_peak": round(max(pss), 1) if pss else None,
            "cpu_s": self.cpu_seconds(),
        }

    def cpu_seconds(self) -> float | None:
        """CPU the process used between the first and the last sample: where a pipeline's time goes by role."""
        first, last = self.samples[0].cpu_s, self.samples[-1].cpu_s
        return None if first is None or last is None else round(last - first, 2)


def listening_pid(port: int) -> int | None:
    """The process with a socket listening on `port` (IPv4 or IPv6), from /proc/net and each process's fds."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        path = PROC / "net" / table
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            columns = line.split()
            local, state, inode = columns[1], columns[3], columns[9]
            if state == LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{inode}]")
    for pid in _pids():
        try:
            if any(os.readlink(fd) in inodes for fd in (PROC / str(pid) / "fd").iterdir()):
                return pid
        except OSError:  # a process that ended, or one this user may not inspect
            continue
    return None


def stack_processes(api_port: int) -> dict[int, str]:
    """pid → role (ragkb_api, ragkb_retriever or ragkb_worker) of the stack whose API listens on `api_port`."""
    api = listening_pid(api_port)
    if api is None:
        return {}
    launcher = parent_of(api)
    found = {}
    for pid in _pids():
        if pid == launcher or not _descends_from(pid, launcher):
            continue
        role = next((role for role in ROLES if role in _cmdline(pid)), None)
        if role is not None:
            found[pid] = role
    return found


class ProcessMemory:
    """Samples the stack's processes in a background thread between `start()` and `stop()`."""

    def __init__(self, api_port: int, interval_s: float = 1.0, pss_interval_s: float = 15.0) -> None:
        self.interval_s = interval_s
        self.pss_every = max(1, round(pss_interval_s / interval_s))
        self._rounds = 0
        self.unavailable: str | None = None
        self._traces: dict[int, ProcessTrace] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="process-memory", daemon=True)
        if not PROC.exists():
            self.unavailable = "no /proc: process memory is measured on Linux only"
        elif not (found := stack_processes(api_port)):
            self.unavailable = f"no ragkb process listens on port {api_port} on this machine"
        else:
            self._traces = {pid: ProcessTrace(pid, role) for pid, role in found.items()}

    def start(self) -> None:
        if self.unavailable is None:
            self._sample(with_pss=True)
            self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Per process: RSS at the start, peak and end, peak PSS and the CPU seconds it used; plus each role's summed
        peak PSS and CPU seconds."""
        if self.unavailable is not None:
            return {"unavailable": self.unavailable}
        self._stop.set()
        self._thread.join()
        self._sample(with_pss=True)
        processes = [trace.summary() for trace in self._traces.values() if trace.samples]
        processes.sort(key=lambda row: (ROLES.index(row["role"]), row["pid"]))
        return {
            "interval_s": self.interval_s,
            "pss_interval_s": self.interval_s * self.pss_every,
            "processes": processes,
            "pss_mb_peak_by_role": _by_role(processes, "pss_mb_peak", 1),
            "cpu_s_by_role": _by_role(processes, "cpu_s", 2),
        }

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._rounds += 1
            self._sample(with_pss=self._rounds % self.pss_every == 0)

    def _sample(self, with_pss: bool) -> None:
        for pid, trace in self._traces.items():
            if (sample := read_memory(pid, with_pss)) is not None:
                trace.samples.append(sample)


def _by_role(processes: list[dict[str, Any]], key: str, digits: int) -> dict[str, float]:
    totals: dict[str, float] = {}
    for row in processes:
        totals[row["role"]] = round(totals.get(row["role"], 0.0) + (row[key] or 0.0), digits)
    return totals


def read_memory(pid: int, with_pss: bool = True) -> Sample | None:
    """RSS from /proc/PID/status, CPU seconds from /proc/PID/stat and, `with_pss`, PSS from
    /proc/PID/smaps_rollup (None where the kernel has no rollup)."""
    try:
        rss_kb = _kb_field((PROC / str(pid) / "status").read_text(), "VmRSS:")
    except OSError:
        return None
    pss_kb: float | None = None
    if with_pss:
        try:
            pss_kb = _kb_field((PROC / str(pid) / "smaps_rollup").read_text(), "Pss:")
        except OSError:
            pss_kb = None
    if rss_kb is None:
        return None
    return Sample(rss_kb / 1024, None if pss_kb is None else pss_kb / 1024, cpu_seconds(pid))


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a process (fields 14 and 15 of /proc/PID/stat, in clock ticks)."""
    fields = _stat_fields(pid)
    return None if fields is None else (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat from field 3 (the state) on; None when the process is gone. The command name (field 2) may
    hold spaces and parentheses: the fields after its last ")" are plain."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def memory_table(memory: dict[str, Any]) -> str:
    if "unavailable" in memory:
        return f"process memory: not measured ({memory['unavailable']})"
    lines = [
        "| process | pid | RSS start MB | RSS peak MB | RSS end MB | PSS peak MB | CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in memory["processes"]:
        lines.append(
            f"| {row['role']} | {row['pid']} | {row['rss_mb_start']} | {row['rss_mb_peak']} | {row['rss_mb_end']} | "
            f"{row['pss_mb_peak']} | {row.get('cpu_s')} |"
        )
    return "\n".join(lines)


def _kb_field(text: str, name: str) -> float | None:
    line = next((line for line in text.splitlines() if line.startswith(name)), None)
    return None if line is None else float(line.split()[1])


def _pids() -> list[int]:
    return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]


def parent_of(pid: int) -> int:
    """The parent's pid (field 4 of /proc/PID/stat); 0 when the process is gone."""
    fields = _stat_fields(pid)
    return 0 if fields is None else int(fields[1])


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        pid = parent_of(pid)
        if pid == ancestor:
            return True
    return False


def _cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
