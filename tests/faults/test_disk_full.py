"""The blob store's disk filled under load, then freed, on a stack whose blob folder is a small tmpfs of this
test's own. While it is full an upload answers 503 with Retry-After (never 500) and a document whose extracted
text cannot be stored is retried, not failed; searches go on (the index is on another disk). Once it is freed,
the same checks as every fault (tests/faults/test_faults.py)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.conftest import FaultStack, fault_stack
from tests.faults.test_faults import run_fault

pytestmark = [pytest.mark.e2e, pytest.mark.faults, pytest.mark.full_fault_suite]
BLOB_DISK_MB = 48
# How long the disk stays full, under load.
FULL_FOR_S = 15.0


class SmallDisk:
    """A tmpfs of BLOB_DISK_MB mounted on a folder: a filesystem that really runs out of space."""

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        self._filler = mountpoint / ".filler"

    def mount(self) -> None:
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        command = ["mount", "-t", "tmpfs", "-o", f"size={BLOB_DISK_MB}m", "tmpfs", str(self.mountpoint)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")

    def fill(self) -> None:
        """Write until the filesystem refuses (ENOSPC)."""
        block = b"\0" * (1024 * 1024)
        try:
            with self._filler.open("wb") as filler:
                while True:
                    filler.write(block)
                    filler.flush()
        except OSError:
            pass

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "--lazy", str(self.mountpoint)], capture_output=True, check=False)


@pytest.fixture(scope="module")
def blob_disk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SmallDisk]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = SmallDisk(tmp_path_factory.mktemp("blob-disk") / "blobs")
    disk.mount()
    yield disk
    disk.unmount()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, blob_disk: SmallDisk) -> Iterator[FaultStack]:
    yield from fault_stack(tmp_path_factory.mktemp("ragkb-faults-disk"), RAGKB_BLOBS__ROOT=str(blob_disk.mountpoint))


def test_the_blob_disk_filled_and_freed(stack: FaultStack, kb: str, blob_disk: SmallDisk) -> None:
    def fill_then_free() -> None:
        blob_disk.fill()
        time.sleep(FULL_FOR_S)
        blob_disk.free()

    tally = run_fault(stack, kb, "blob disk full, then freed", fill_then_free)
    assert tally.outcomes["upload 503 with Retry-After"] > 0, "no upload met the full disk: the fault missed"
