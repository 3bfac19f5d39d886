"""bench/int8_passages.py's own figures: cosine agreement, the paired difference with its interval, the sample."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    return importlib.import_module("int8_passages")


def test_identical_vectors_agree_fully_and_a_turned_one_shows_as_the_minimum(bench: ModuleType) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(200, 8)).astype(np.float32)
    assert bench.cosine_agreement(vectors, vectors) == {"min": 1.0, "p1": 1.0, "mean": 1.0}
    turned = vectors.copy()
    turned[7] = -turned[7]
    agreement = bench.cosine_agreement(turned, vectors * 3)  # lengths do not matter, directions do
    assert agreement["min"] == -1.0
    assert agreement["mean"] == pytest.approx((199 - 1) / 200, abs=1e-4)


def test_a_uniform_loss_is_its_own_mean_and_interval(bench: ModuleType) -> None:
    baseline = [0.8, 0.6, 0.4, 1.0]
    difference = bench.paired_difference(baseline, [value - 0.01 for value in baseline], seed=21)
    assert difference["delta"] == pytest.approx(-0.01)
    assert difference["ci"] == pytest.approx([-0.01, -0.01])
    assert (difference["better"], difference["worse"]) == (0, 4)


def test_the_interval_of_a_mixed_difference_holds_its_mean(bench: ModuleType) -> None:
    baseline = [0.5] * 100
    other = [0.5 + (0.1 if i % 3 == 0 else -0.02) for i in range(100)]
    difference = bench.paired_difference(baseline, other, seed=21)
    low, high = difference["ci"]
    assert low < difference["delta"] < high
    assert (difference["better"], difference["worse"]) == (34, 66)


def test_the_sample_spreads_over_the_whole_collection(bench: ModuleType) -> None:
    positions = bench.evenly_spaced(1000, 4)
    assert positions == [0, 250, 500, 750]
    assert bench.evenly_spaced(3, 10) == [0, 1, 2]
