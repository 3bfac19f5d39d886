"""The re-index quality gate: a new index generation must retrieve a KB's quality-gate question set about as
well as the generation it replaces, or the KB keeps the old one.

The worker scores both generations with nDCG@10 (ragkb_core.metrics, the evaluations' definition) on the
KB's question set marked `is_quality_gate`, searching each with the KB's retrieval settings and default
mode, and refuses the switch when the new figure is lower than the old by more than `NDCG_TOLERANCE`. There
is no check when the KB has no gate set, when the serving generation holds nothing (a first index), or when
the job was started with `skip_quality_gate` (an operator's override). The decision is recorded on the
job (`Job.params["quality_check"]`), whichever way it goes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from ragkb_core.metrics import NDCG_AT_10, JudgedQuestions, mean_scores, score_queries
from ragkb_core.metrics import Question as JudgedQuestion
from ragkb_store.db.models import Judgement, Question, QuestionSet

# How much lower the new generation's nDCG@10 may be and still switch. Not 0: the same index rebuilt can
# order near-ties differently (HNSW graphs are built afresh, DBSF normalises by the answer's own scores), and
# a re-index whose only purpose is to take new documents in must not fail on that noise. Small enough that
# a change which loses a relevant document from the top 10 of even one query in 100 is refused.
NDCG_TOLERANCE = 0.005
# Passages per gate search (top_k and max_blocks), as an evaluation's default depth: enough for a ranking of
# at least 10 documents when several passages of one document rank together.
GATE_DEPTH = 100

SKIPPED_NO_SET = "the knowledge base has no quality-gate question set"
SKIPPED_FIRST_INDEX = "the serving generation holds no documents (a first index)"
SKIPPED_BY_REQUEST = "skip_quality_gate was set on the re-index"


@dataclass(frozen=True)
class GateSet(JudgedQuestions):
    """A KB's quality-gate question set: its questions in order and, per query id, source_id → grade."""

    set_id: str


class QualityCheck(BaseModel):
    """What the gate found (Job.params["quality_check"]): both figures, or why there was no comparison."""

    passed: bool
    skipped: str | None = None
    question_set_id: str | None = None
    queries: int = 0
    old_generation: int | None = None
    new_generation: int | None = None
    old_ndcg_at_10: float | None = None
    new_ndcg_at_10: float | None = None
    tolerance: float = NDCG_TOLERANCE

    @classmethod
    def skipped_because(cls, reason: str) -> QualityCheck:
        return cls(passed=True, skipped=reason)

    def refusal(self) -> str:
        """The job's error when the gate refused the switch: both figures and what to do."""
        return (
            f"quality gate: nDCG@10 of the new generation {self.new_generation} is {self.new_ndcg_at_10:.4f}, "
            f"lower than the serving generation {self.old_generation}'s {self.old_ndcg_at_10:.4f} by more than "
            f"{self.tolerance} (question set {self.question_set_id}, {self.queries} queries); the old generation "
            "keeps serving and the new one was dropped; re-index with skip_quality_gate to switch anyway"
        )


def passes(old_ndcg: float, new_ndcg: float, tolerance: float = NDCG_TOLERANCE) -> bool:
    """The gate's decision: the new generation may be worse than the old one by at most `tolerance`."""
    # Rounded like the recorded figures, so that the decision can be checked against what the job shows.
    return round(old_ndcg - new_ndcg, 6) <= tolerance


def load_gate_set(session: Session, kb_id: str) -> GateSet | None:
    """The KB's quality-gate question set, if it has one."""
    set_id = session.scalars(
        select(QuestionSet.id).where(QuestionSet.kb_id == kb_id, QuestionSet.is_quality_gate.is_(True))
    ).first()
    if set_id is None:
        return None
    return GateSet(*load_question_set(session, set_id), set_id)


def load_question_set(session: Session, set_id: str) -> tuple[list[JudgedQuestion], dict[str, dict[str, int]]]:
    """A question set's questions in their given order and, per query id, source_id → grade."""
    rows = session.scalars(select(Question).where(Question.set_id == set_id).order_by(Question.position))
    questions = [JudgedQuestion(row.query_id, row.text) for row in rows]
    qrels: dict[str, dict[str, int]] = {question.query_id: {} for question in questions}
    judgements = session.execute(
        select(Judgement.query_id, Judgement.source_id, Judgement.grade).where(Judgement.set_id == set_id)
    )
    for query_id, source_id, grade in judgements:
        qrels.setdefault(query_id, {})[source_id] = grade
    return questions, qrels


def ndcg_at_10(gate: GateSet, rankings: Mapping[str, Sequence[str]]) -> float:
    """The mean nDCG@10 of `rankings` (per query id, source_ids best first) over every judged query of the set,
    rounded as the job records it; a query without a ranking scores 0."""
    scores = score_queries(gate.qrels, rankings, GATE_DEPTH)
    return round(mean_scores(scores, [NDCG_AT_10])[NDCG_AT_10], 4)
