"""From retrieved candidates to the answer: order, then the cuts, each recorded for `explain`.

Pure functions over plain data, so that every rule is unit-tested without an engine. The order of the
cuts is the contract:

0. `collapse` — on request, a document's best candidate only, before anything is counted: `top_k` and
   `max_blocks` then count documents;
1. `top_k` — a KB (or, with quotas, a KB's share of one doc_type) keeps its best `top_k` candidates
   (only bites after reranking, which reads `top_k × candidate_multiplier` of them);
2. merge all KBs by the answer's score (`SearchHit.score`: the reranker's when it ran, else the fused one);
3. `dedupe` — the same passage text twice (e.g. one file uploaded under two source ids) is kept once;
4. `threshold` — a reranked passage under its KB's `score_threshold` (only when the reranker ran);
5. `relevance` — a passage whose relevance is under its KB's `min_relevance` (the similarity floor, reranked
   or not; a passage without a relevance passes);
6. `quota` — per doc_type, at most its quota;
7. `max_blocks` — the answer's size across KBs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ragkb_core.contracts import Collapse, DocType, DroppedHit, DropStage, SearchHit


@dataclass
class Candidate:
    """A retrieved passage and what the cuts need to know about where it came from."""

    hit: SearchHit
    # The KB-part it was retrieved in: a KB, or a KB's doc_type share when quotas are set.
    part: str
    threshold: float | None  # its KB's score_threshold when the reranker applies to it; else None
    floor: float = 0.0  # its KB's min_relevance


@dataclass
class Assembled:
    results: list[SearchHit]
    dropped: list[DroppedHit]


def assemble(
    candidates: Sequence[Candidate],
    *,
    top_k_per_part: dict[str, int],
    doc_type_quotas: dict[DocType, int] | None,
    max_blocks: int,
    collapse: Collapse | None = None,
) -> Assembled:
    dropped: list[DroppedHit] = []
    if collapse == "document":
        candidates = _one_per_document(sorted(candidates, key=lambda candidate: -candidate.hit.score), dropped)
    kept = _cut_parts_to_top_k(candidates, top_k_per_part, dropped)
    kept = sorted(kept, key=lambda candidate: -candidate.hit.score)
    kept = _dedupe(kept, dropped)
    kept = _apply_thresholds(kept, dropped)
    kept = _apply_floors(kept, dropped)
    kept = _apply_quotas(kept, doc_type_quotas, dropped)
    for candidate in kept[max_blocks:]:
        dropped.append(_drop(candidate, "max_blocks", f"beyond max_blocks = {max_blocks}"))
    return Assembled(results=[candidate.hit for candidate in kept[:max_blocks]], dropped=dropped)


def _cut_parts_to_top_k(
    candidates: Iterable[Candidate], top_k_per_part: dict[str, int], dropped: list[DroppedHit]
) -> list[Candidate]:
    seen: dict[str, int] = {}
    kept: list[Candidate] = []
    for candidate in sorted(candidates, key=lambda candidate: -candidate.hit.score):
        seen[candidate.part] = seen.get(candidate.part, 0) + 1
        top_k = top_k_per_part[candidate.part]
        if seen[candidate.part] > top_k:
            dropped.append(_drop(candidate, "top_k", f"beyond its knowledge base's top_k = {top_k}"))
        else:
            kept.append(candidate)
    return kept


def _dedupe(ordered: list[Candidate], dropped: list[DroppedHit]) -> list[Candidate]:
    first_by_text: dict[str, SearchHit] = {}
    kept: list[Candidate] = []
    for candidate in ordered:
        key = " ".join(candidate.hit.text.split())
        first = first_by_text.setdefault(key, candidate.hit)
        if first is candidate.hit:
            kept.append(candidate)
        else:
            dropped.append(_drop(candidate, "dedupe", f"same text as passage {first.chunk_id}, ranked higher"))
    return kept


def _one_per_document(ordered: list[Candidate], dropped: list[DroppedHit]) -> list[Candidate]:
    best_by_document: dict[tuple[str, str], SearchHit] = {}
    kept: list[Candidate] = []
    for candidate in ordered:
        hit = candidate.hit
        best = best_by_document.setdefault((hit.knowledge_base_id, hit.document_id), hit)
        if best is hit:
            kept.append(candidate)
        else:
            dropped.append(_drop(candidate, "collapse", f"its document's passage {best.chunk_id} ranked higher"))
    return kept


def _apply_thresholds(ordered: list[Candidate], dropped: list[DroppedHit]) -> list[Candidate]:
    kept: list[Candidate] = []
    for candidate in ordered:
        score = candidate.hit.rerank_score
        if candidate.threshold is not None and score is not None and score < candidate.threshold:
            reason = f"reranker score {score:.4f} is under the score_threshold {candidate.threshold}"
            dropped.append(_drop(candidate, "threshold", reason))
        else:
            kept.append(candidate)
    return kept


def _apply_floors(ordered: list[Candidate], dropped: list[DroppedHit]) -> list[Candidate]:
    kept: list[Candidate] = []
    for candidate in ordered:
        relevance = candidate.hit.relevance
        if relevance is not None and relevance < candidate.floor:
            reason = f"relevance {relevance:.4f} is under the min_relevance {candidate.floor}"
            dropped.append(_drop(candidate, "relevance", reason))
        else:
            kept.append(candidate)
    return kept


def _apply_quotas(
    ordered: list[Candidate], quotas: dict[DocType, int] | None, dropped: list[DroppedHit]
) -> list[Candidate]:
    if not quotas:
        return ordered
    taken: dict[str, int] = {}
    kept: list[Candidate] = []
    for candidate in ordered:
        doc_type = candidate.hit.doc_type
        quota = quotas.get(doc_type)
        taken[doc_type] = taken.get(doc_type, 0) + 1
        if quota is not None and taken[doc_type] > quota:
            dropped.append(_drop(candidate, "quota", f"beyond the {doc_type} quota of {quota}"))
        else:
            kept.append(candidate)
    return kept


def _drop(candidate: Candidate, stage: DropStage, reason: str) -> DroppedHit:
    return DroppedHit(stage=stage, reason=reason, hit=candidate.hit)
