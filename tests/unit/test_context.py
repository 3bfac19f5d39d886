"""Context assembly: numbered sources, citations that match them, and the token budget."""

from __future__ import annotations

from ragkb_api.tools.context import assemble_context, estimate_tokens
from ragkb_core.contracts import SearchHit


def hit(n: int, text: str, page: int | None = None) -> SearchHit:
    return SearchHit(
        chunk_id=f"c{n}",
        text=text,
        score=1 / n,
        knowledge_base_id="kb",
        document_id=f"d{n}",
        source_id=f"s{n}.pdf",
        title=f"Doc {n}",
        version=1,
        ordinal=0,
        heading_path=["Part", f"Art. {n}"],
        page=page,
    )


def test_blocks_are_numbered_with_their_source_and_cited_in_order() -> None:
    result = assemble_context("q", [hit(1, "First passage.", page=3), hit(2, "Second passage.")], 500)
    assert (
        result.context
        == "[1] Doc 1 > Part > Art. 1 (p. 3)\nFirst passage.\n\n[2] Doc 2 > Part > Art. 2\nSecond passage."
    )
    assert [(c.number, c.document_id, c.page) for c in result.citations] == [(1, "d1", 3), (2, "d2", None)]
    assert result.omitted == 0


def test_passages_that_do_not_fit_the_budget_are_left_out_whole() -> None:
    hits = [hit(n, " ".join(["word"] * 40)) for n in range(1, 6)]
    # Each block costs 63 estimated tokens (48 words × 1.3): two fit in 130, the third would not.
    result = assemble_context("q", hits, 130)
    assert len(result.citations) == 2 and result.omitted == 3
    assert result.estimated_tokens <= 130


def test_a_first_passage_longer_than_the_budget_is_cut() -> None:
    result = assemble_context("q", [hit(1, "年次有給休暇" * 200)], 60)
    assert result.context.endswith("…") and result.estimated_tokens <= 60
    assert len(result.citations) == 1


def test_token_estimate_counts_japanese_characters_and_latin_words() -> None:
    assert estimate_tokens("有給休暇") == 4
    assert estimate_tokens("ten words " * 5) == 13
