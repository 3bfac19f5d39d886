"""Re-indexing a KB: what the job builds, which generations serve, and how its items settle.

A re-index builds a new index generation from the stored originals while the live one serves; the worker
writes every document into it, then checks it (every indexed document present at its live version, and,
when the KB has a quality-gate question set, retrieval not worse than the serving generation's: see
ragkb_store.quality_gate) and switches the KB's alias to it in one step. The previous generation is kept for
a rollback. Shared by the api (which starts jobs and rolls back) and the worker (which builds, checks and
switches)."""

from __future__ import annotations

from pydantic import BaseModel
from sqlalchemy import select
from sqlalchemy.orm import Session

from ragkb_core.kb_settings import KbAnalyzer, KbChunking
from ragkb_store.db.models import Job, KnowledgeBase
from ragkb_store.states import ACTIVE_JOB_STATUSES, JobKind


class BuildSettings(BaseModel):
    """What an index generation is built with: changing any of it needs a re-index."""

    chunking: KbChunking
    analyzer: KbAnalyzer
    # The model the generation's dense vectors come from (a name of EmbeddingSettings.model_names). None only
    # in jobs and rollback targets recorded before a re-index could change it: the KB's model then.
    embedding_model: str | None = None


class ReindexTarget(BaseModel):
    """A re-index job's parameters (Job.params)."""

    generation: int
    settings: BuildSettings
    # The documents the job started with: one deleted meanwhile may still have been written into the new
    # generation by a build already under way, so the check removes those that no longer exist.
    document_ids: list[str] = []
    # Their source_ids (the items' keys), so that the item of a document deleted meanwhile still settles.
    source_ids: dict[str, str] = {}
    # An operator's override: switch even when the new generation scores worse on the KB's quality-gate
    # question set (ragkb_store.quality_gate).
    skip_quality_gate: bool = False


class IndexState(BaseModel):
    """KnowledgeBase.index_state: the previous generation and its settings, while it is kept for a rollback."""

    previous_generation: int | None = None
    previous_settings: BuildSettings | None = None


def settings_of(kb: KnowledgeBase) -> BuildSettings:
    """What the KB's serving generation was built with."""
    return BuildSettings.model_validate(
        {"chunking": kb.chunking, "analyzer": kb.analyzer, "embedding_model": kb.embedding_model}
    )


def take_settings(kb: KnowledgeBase, settings: BuildSettings) -> None:
    """Record on the KB the settings of the generation that now serves (a switch or a rollback)."""
    kb.chunking = settings.chunking.model_dump()
    kb.analyzer = settings.analyzer.model_dump()
    kb.analyzer_version = settings.analyzer.version
    kb.embedding_model = settings.embedding_model or kb.embedding_model


def active_reindex(session: Session, kb_id: str) -> Job | None:
    query = select(Job).where(Job.kb_id == kb_id, Job.kind == JobKind.REINDEX, Job.status.in_(ACTIVE_JOB_STATUSES))
    return session.scalars(query).first()
