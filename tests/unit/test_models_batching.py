"""How the embedder cuts passages into forward runs."""

from __future__ import annotations

from ragkb_models.embedder import plan_runs


def test_every_text_lands_in_exactly_one_run() -> None:
    lengths = [30, 500, 12, 80, 80, 7, 300]
    runs = plan_runs(lengths, max_texts=32, max_tokens=512)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))


def test_runs_hold_similar_lengths_within_the_padded_token_budget() -> None:
    lengths = [30, 500, 12, 80, 80, 7, 300]
    runs = plan_runs(lengths, max_texts=32, max_tokens=512)
    for run in runs:
        assert len(run) * max(lengths[i] for i in run) <= 512
    # Sorted by length: the short texts share runs, the long ones come last.
    assert runs[-1] == [1]
    assert runs[0][:2] == [5, 2]


def test_the_text_count_limit_applies_to_short_texts() -> None:
    runs = plan_runs([5] * 10, max_texts=4, max_tokens=512)
    assert [len(run) for run in runs] == [4, 4, 2]


def test_a_text_longer_than_the_budget_still_gets_a_run() -> None:
    assert plan_runs([900, 10], max_texts=8, max_tokens=512) == [[1], [0]]


def test_no_texts_no_runs() -> None:
    assert plan_runs([], max_texts=8, max_tokens=512) == []
