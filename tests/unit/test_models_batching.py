"""How the embedder cuts passages into forward runs."""

from __future__ import annotations

from ragkb_core.settings import EmbeddingSettings
from ragkb_models.embedder import plan_runs

# The default bound on a run's padding.
SHARE = EmbeddingSettings().max_padding_share


def test_every_text_lands_in_exactly_one_run() -> None:
    lengths = [30, 500, 12, 80, 80, 7, 300]
    runs = plan_runs(lengths, max_texts=32, max_tokens=512, max_padding_share=SHARE)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))


def test_runs_hold_similar_lengths_within_the_padded_token_budget() -> None:
    lengths = [30, 500, 12, 80, 80, 7, 300]
    runs = plan_runs(lengths, max_texts=32, max_tokens=512, max_padding_share=SHARE)
    for run in runs:
        assert len(run) * max(lengths[i] for i in run) <= 512
    # Sorted by length, the long ones last; only texts of (nearly) one length share a run.
    assert runs[-1] == [1]
    assert [3, 4] in runs


def test_texts_of_different_lengths_are_not_padded_into_one_run() -> None:
    # 7 and 12 tokens in one run would be 12 × 2 = 24 padded tokens for 19 real ones (21 % padding).
    assert plan_runs([12, 7], max_texts=8, max_tokens=512, max_padding_share=SHARE) == [[1], [0]]
    # 100 and 104: 4 % padding, one run.
    assert plan_runs([104, 100], max_texts=8, max_tokens=512, max_padding_share=SHARE) == [[1, 0]]


def test_the_padding_bound_can_be_lifted() -> None:
    assert plan_runs([12, 7], max_texts=8, max_tokens=512, max_padding_share=1.0) == [[1, 0]]


def test_the_text_count_limit_applies_to_short_texts() -> None:
    runs = plan_runs([5] * 10, max_texts=4, max_tokens=512, max_padding_share=SHARE)
    assert [len(run) for run in runs] == [4, 4, 2]


def test_a_text_longer_than_the_budget_still_gets_a_run() -> None:
    assert plan_runs([900, 10], max_texts=8, max_tokens=512, max_padding_share=SHARE) == [[1], [0]]


def test_no_texts_no_runs() -> None:
    assert plan_runs([], max_texts=8, max_tokens=512, max_padding_share=SHARE) == []
