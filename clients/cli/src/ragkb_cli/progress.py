"""Progress bars on stderr: tqdm when it is installed and stderr is a terminal, otherwise nothing at all."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


class Bar:
    """A bar that does nothing unless it wraps a tqdm bar (tqdm is an optional dependency)."""

    def __init__(self, bar: Any = None) -> None:
        self._bar = bar

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def set(self, current: int, total: Any) -> None:
        if self._bar is not None:
            if isinstance(total, int):
                self._bar.total = total
            self._bar.n = current
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


ProgressFactory = Callable[[int | None, str], Bar]


def no_progress(total: int | None, description: str) -> Bar:
    return Bar()


def terminal_progress(enabled: bool) -> ProgressFactory:
    """tqdm bars when `enabled` and stderr is a terminal and tqdm can be imported; otherwise silent ones."""
    if not enabled or not sys.stderr.isatty():
        return no_progress
    try:
        tqdm = importlib.import_module("tqdm").tqdm
    except ImportError:
        return no_progress

    def make(total: int | None, description: str) -> Bar:
        return Bar(tqdm(total=total, desc=description, unit="file", file=sys.stderr, leave=False))

    return make
