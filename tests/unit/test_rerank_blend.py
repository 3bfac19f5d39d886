"""How a reranked list is ordered: the reranker's score blended with the fused score (blend_scores), and what the
reranker reads of a passage (passage_for_reranking)."""

from __future__ import annotations

import pytest

from ragkb_models.cross_encoder import blend_scores, passage_for_reranking


def order(scores: list[float]) -> list[int]:
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def test_weight_one_is_the_reranker_alone() -> None:
    rerank = [0.2, 0.9, 0.5]
    assert blend_scores(rerank, [3.0, 1.0, 2.0], 1.0) == pytest.approx(rerank)


def test_weight_zero_keeps_the_fused_order_scaled_to_the_unit_interval() -> None:
    assert blend_scores([0.9, 0.1, 0.5], [0.031, 0.016, 0.024], 0.0) == pytest.approx([1.0, 0.0, 8 / 15])


def test_a_confident_reranker_overturns_a_close_fused_call_but_not_a_clear_one() -> None:
    fused = [1.00, 0.98, 0.10]
    rerank = [0.10, 0.90, 0.99]
    assert order(blend_scores(rerank, fused, 0.5)) == [1, 0, 2]


def test_equal_fused_scores_leave_the_order_to_the_reranker() -> None:
    assert order(blend_scores([0.3, 0.8], [0.5, 0.5], 0.2)) == [1, 0]


def test_nothing_to_blend() -> None:
    assert blend_scores([], [], 0.5) == []


def test_the_reranker_reads_title_and_headings_before_the_text() -> None:
    assert (
        passage_for_reranking("就業規則", ["第3章", "休暇"], "年次有給休暇は…")
        == "就業規則 > 第3章 > 休暇\n年次有給休暇は…"
    )
    assert passage_for_reranking(None, [], "plain") == "plain"
