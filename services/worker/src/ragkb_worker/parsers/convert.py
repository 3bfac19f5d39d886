"""Legacy formats converted by LibreOffice (Debian's `libreoffice-*-nogui`) in a sandboxed subprocess.

Each conversion runs `soffice --headless --convert-to` in a fresh temporary folder with its own user profile
(a copy of one made once per process: starting from nothing costs a few seconds), under resource limits set
by prlimit (address space, written file size, CPU seconds, open files) and a wall-clock timeout after which
its whole process group is killed. The profile turns macros off and never updates links to other files or URLs, so a
converted file cannot pull in content from the machine it is converted on. The input and output sizes are
bounded; the output is parsed by ragkb's own parser for its format (.docx, .pptx).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from ragkb_core.errors import ParseFailed, PayloadTooLarge
from ragkb_core.settings import LimitSettings

_ADDRESS_SPACE_BYTES = 4 * 1024**3
_CPU_SECONDS_PER_TIMEOUT_SECOND = 2
_OPEN_FILES = 256
# Settings of the private profile: macros never run; links to other files or URLs are never updated
# (2 = never) in Writer, Calc and Impress; no first-start wizard, no update check, no recovery data.
_REGISTRY_ITEMS = (
    ("org.openoffice.Office.Common/Security/Scripting", "MacroSecurityLevel", "3"),
    ("org.openoffice.Office.Common/Security/Scripting", "DisableMacrosExecution", "true"),
    ("org.openoffice.Office.Writer/Content/Update", "Link", "2"),
    ("org.openoffice.Office.Calc/Content/Update", "Link", "2"),
    ("org.openoffice.Office.Impress/Content/Update", "Link", "2"),
    ("org.openoffice.Setup/Office", "FirstStartWizardCompleted", "true"),
    ("org.openoffice.Office.Common/Misc", "UseLocking", "false"),
    ("org.openoffice.Office.Recovery/RecoveryInfo", "Enabled", "false"),
)
_REGISTRY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
    'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
    + "".join(
        f'<item oor:path="/{path}"><prop oor:name="{name}" oor:op="fuse"><value>{value}</value></prop></item>\n'
        for path, name, value in _REGISTRY_ITEMS
    )
    + "</oor:items>\n"
)


class _ProfileTemplate:
    """One profile per worker process, made on first use and copied for every conversion."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._path: Path | None = None

    def path(self, soffice: str, limits: LimitSettings) -> Path:
        with self._lock:
            if self._path is None or not self._path.is_dir():
                self._path = _make_template(soffice, limits)
                atexit.register(shutil.rmtree, self._path, ignore_errors=True)
            return self._path


_TEMPLATE = _ProfileTemplate()


def convert(data: bytes, source_suffix: str, target: str, kind: str, limits: LimitSettings) -> bytes:
    """`data` (a file with `source_suffix`, e.g. ".doc") converted to `target` (e.g. "docx")."""
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        raise ParseFailed(
            f"{kind} files cannot be read on this server: LibreOffice is not installed "
            "(libreoffice-writer-nogui, libreoffice-calc-nogui, libreoffice-impress-nogui)"
        )
    with tempfile.TemporaryDirectory(prefix="ragkb-convert-") as folder:
        work = Path(folder)
        source = work / f"input{source_suffix}"
        source.write_bytes(data)
        profile = _profile(work, soffice, limits)
        _run(_command(soffice, profile, target, source, work / "out"), work, kind, limits)
        output = work / "out" / f"input.{target}"
        if not output.is_file():
            raise ParseFailed(f"the {kind} file cannot be read: LibreOffice could not convert it (damaged?)")
        if output.stat().st_size > limits.max_upload_bytes * 4:
            raise PayloadTooLarge(f"the {kind} file converts to more than {limits.max_upload_bytes * 4} bytes")
        return output.read_bytes()


def _command(soffice: str, profile: Path, target: str, source: Path, out: Path) -> list[str]:
    return [
        soffice,
        f"-env:UserInstallation={profile.as_uri()}",
        "--headless",
        "--invisible",
        "--nologo",
        "--norestore",
        "--nolockcheck",
        "--nodefault",
        "--convert-to",
        target,
        "--outdir",
        str(out),
        str(source),
    ]


def _profile(work: Path, soffice: str, limits: LimitSettings) -> Path:
    """A private copy of this process's profile template (made on first use)."""
    profile = work / "profile"
    shutil.copytree(_TEMPLATE.path(soffice, limits), profile, symlinks=True)
    return profile


def _make_template(soffice: str, limits: LimitSettings) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"ragkb-soffice-profile-{os.getpid()}-"))
    user = root / "user"
    user.mkdir(parents=True)
    (user / "registrymodifications.xcu").write_text(_REGISTRY, encoding="utf-8")
    # A first start fills in the rest of the profile; converting an empty text file is the cheapest one.
    seed = root / "seed.txt"
    seed.write_text("ragkb\n", encoding="utf-8")
    _run(_command(soffice, root, "odt", seed, root / "seed-out"), root, "LibreOffice profile", limits)
    shutil.rmtree(root / "seed-out", ignore_errors=True)
    seed.unlink(missing_ok=True)
    return root


def _run(command: list[str], work: Path, kind: str, limits: LimitSettings) -> None:
    timeout = limits.convert_timeout_s
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(work),
        "TMPDIR": str(work),
        "LANG": "C.UTF-8",
        "SAL_USE_VCLPLUGIN": "svp",
    }
    try:
        process = _start([*_resource_limits(limits, timeout), *command], work, environment)
    except FileNotFoundError as exc:
        raise ParseFailed(f"{kind} files cannot be read on this server: {exc.filename} is not installed") from exc
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ParseFailed(
            f"the {kind} file could not be converted within {timeout:g} s (RAGKB_LIMITS__CONVERT_TIMEOUT_S)"
        ) from exc
    finally:
        _kill_group(process)


def _start(command: list[str], work: Path, environment: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command,
        cwd=work,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: a timeout kills every process it started
    )


def _resource_limits(limits: LimitSettings, timeout: float) -> list[str]:
    """util-linux's prlimit (in every Debian) sets the limits the conversion and its children run under: the
    worker may run threads, so no Python code runs between fork and exec."""
    written = limits.max_upload_bytes * 4
    cpu = int(timeout * _CPU_SECONDS_PER_TIMEOUT_SECOND) + 1
    return [
        shutil.which("prlimit") or "prlimit",
        f"--as={_ADDRESS_SPACE_BYTES}",
        f"--fsize={written}",
        f"--cpu={cpu}",
        f"--nofile={_OPEN_FILES}",
        "--core=0",
        "--",
    ]


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """soffice starts helper processes: end the whole group, then reap the one we started."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5)
