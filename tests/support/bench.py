"""The scripts under bench/ as modules, for their unit tests: bench/ is not a package, its scripts import each
other by name (`from common import …`)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def bench_module(name: str) -> ModuleType:
    """bench/NAME.py imported with bench/ on the path only while it imports."""
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))
