"""Context assembly: the passages a search selected, as one prompt-ready block with numbered sources.

Token counts are an estimate that needs no model (the api loads none): one token per CJK character and
about 1.3 per Latin word — close to common LLM tokenizers for Japanese and English prose, and used only to
keep the block within the caller's budget."""

from __future__ import annotations

import math
import re

from ragkb_api.tools.schemas import ContextCitation, ContextResponse
from ragkb_core.contracts import SearchHit

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]")
_WORD = re.compile(r"[^\s\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]+")
TRUNCATION_MARK = " …"


def estimate_tokens(text: str) -> int:
    return len(_CJK.findall(text)) + math.ceil(1.3 * len(_WORD.findall(text)))


def assemble_context(query: str, hits: list[SearchHit], token_budget: int) -> ContextResponse:
    """Whole passages in rank order while they fit; the first one is cut to the budget if it alone is too long."""
    blocks: list[str] = []
    citations: list[ContextCitation] = []
    used = 0
    for hit in hits:
        number = len(citations) + 1
        block = _block(number, hit, hit.text)
        cost = estimate_tokens(block)
        if used + cost > token_budget:
            if citations:
                break
            block = _cut_to_budget(number, hit, token_budget)
            cost = estimate_tokens(block)
        blocks.append(block)
        citations.append(_citation(number, hit))
        used += cost
    return ContextResponse(
        query=query,
        context="\n\n".join(blocks),
        citations=citations,
        estimated_tokens=used,
        omitted=len(hits) - len(citations),
    )


def _block(number: int, hit: SearchHit, text: str) -> str:
    return f"[{number}] {_source_line(hit)}\n{text}"


def _source_line(hit: SearchHit) -> str:
    parts = [hit.title or hit.source_id, *hit.heading_path]
    page = f" (p. {hit.page})" if hit.page is not None else ""
    return " > ".join(part for part in parts if part) + page


def _cut_to_budget(number: int, hit: SearchHit, token_budget: int) -> str:
    text = hit.text
    while text and estimate_tokens(_block(number, hit, text + TRUNCATION_MARK)) > token_budget:
        text = text[: int(len(text) * 0.9)]
    return _block(number, hit, text + TRUNCATION_MARK) if text else _block(number, hit, TRUNCATION_MARK.strip())


def _citation(number: int, hit: SearchHit) -> ContextCitation:
    return ContextCitation(
        number=number,
        chunk_id=hit.chunk_id,
        knowledge_base_id=hit.knowledge_base_id,
        document_id=hit.document_id,
        source_id=hit.source_id,
        title=hit.title,
        heading_path=hit.heading_path,
        page=hit.page,
        char_start=hit.char_start,
        char_end=hit.char_end,
        score=hit.score,
        knowledge_base_name=hit.knowledge_base_name,
        original_url=hit.original_url,
    )
