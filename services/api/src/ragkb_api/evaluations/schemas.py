"""Public shapes of question sets and evaluations (v1 API)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints, field_validator

from ragkb_api.evaluations.beir import MAX_GRADE, MAX_QUERY_ID_CHARS, MAX_QUESTIONS, MAX_SOURCE_ID_CHARS
from ragkb_api.fields import UtcDateTime
from ragkb_core.contracts import SearchMode
from ragkb_core.kb_settings import KbRetrieval, RetrievalOverrides

QueryId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_QUERY_ID_CHARS)]
SourceId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_SOURCE_ID_CHARS)]
Grade = Annotated[int, Field(ge=0, le=MAX_GRADE)]
SetName = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]
MAX_DEPTH = 100
RANKED_SHOWN = 10


class QuestionIn(BaseModel):
    id: QueryId
    # The configured bound (RAGKB_LIMITS__MAX_QUERY_CHARS) is checked by the service.
    text: str = Field(min_length=1)


class QuestionSetCreate(BaseModel):
    """Queries and their relevance judgements: `qrels` maps a query id to {document source_id: grade}
    (0 = judged not relevant). The same as a BEIR folder's queries.jsonl and qrels/<split>.tsv (which can
    be uploaded as they are: multipart `queries` and `qrels` files, with `name`)."""

    name: SetName
    queries: list[QuestionIn] = Field(min_length=1, max_length=MAX_QUESTIONS)
    qrels: dict[QueryId, dict[SourceId, Grade]]
    # Make this the set a re-index of the KB is judged by (the KB's previous gate set stops being one).
    quality_gate: bool = False


class QuestionSetPatch(BaseModel):
    name: SetName | None = None
    quality_gate: bool | None = None


class QuestionSetOut(BaseModel):
    id: str
    knowledge_base_id: str
    name: str
    quality_gate: bool
    query_count: int
    judgement_count: int
    created_at: UtcDateTime


class QuestionSetDetail(QuestionSetOut):
    queries: list[QuestionIn]
    qrels: dict[str, dict[str, int]]


class BeirExport(BaseModel):
    """The set as BEIR files: write `queries_jsonl` to queries.jsonl and `qrels_tsv` to qrels/<split>.tsv."""

    name: str
    queries_jsonl: str
    qrels_tsv: str


class RunSpec(BaseModel):
    """How one side of an evaluation searches: a mode (default: the KB's own) and retrieval overrides."""

    mode: SearchMode | None = None
    settings: RetrievalOverrides = Field(default_factory=RetrievalOverrides)


class EvaluationRequest(RunSpec):
    question_set_id: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    # Also run the set this way and compare per query.
    compare: RunSpec | None = None
    # Evaluate only the set's first N queries (in the order they were given).
    max_queries: int | None = Field(default=None, ge=1)
    # Passages each search returns (settings.top_k and max_blocks unless set there), before the reduction
    # to documents; Recall@depth is reported besides Recall@100.
    depth: int = Field(default=MAX_DEPTH, ge=1, le=MAX_DEPTH)

    @field_validator("question_set_id")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()


class QueryResult(BaseModel):
    query_id: str
    metrics: dict[str, float]
    # The first documents (source_ids) of the reduced ranking.
    ranked: list[str]


class RunResult(BaseModel):
    mode: str
    # The retrieval settings the KB was searched with (after the request's overrides).
    settings: KbRetrieval | None
    metrics: dict[str, float]
    # Queries whose answer was degraded (e.g. the reranker ran out of its budget), and why.
    degraded_queries: int
    degraded_reasons: list[str]
    per_query: list[QueryResult]


class MetricComparison(BaseModel):
    """compare − base of the mean, and per query how often compare scored higher, lower or the same."""

    delta: float
    wins: int
    losses: int
    ties: int


class Comparison(RunResult):
    per_metric: dict[str, MetricComparison]


class EvaluationOut(RunResult):
    """The run under the request's `mode` and `settings` (top level), and the `compare` run if asked for."""

    knowledge_base_id: str
    question_set_id: str
    queries: int
    depth: int
    # How a run is judged, spelled out: the judgements are per document, a search ranks passages.
    reduction: str
    metric_definitions: dict[str, str]
    compare: Comparison | None = None
    took_ms: float
