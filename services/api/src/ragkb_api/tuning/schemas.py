"""Public shapes of tuning and of the versions of a KB's retrieval settings (v1 API)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ragkb_api.fields import UtcDateTime
from ragkb_api.jobs.schemas import JobOut
from ragkb_core.kb_settings import KbRetrieval
from ragkb_core.tuning import TuneResult
from ragkb_store.states import SettingsOrigin


class TuneOut(BaseModel):
    """A tune job and, once it succeeded, its result."""

    job: JobOut
    result: TuneResult | None = None


class ChangeReason(BaseModel):
    """Why (recorded with the new settings version; a default that says what made it otherwise)."""

    reason: str | None = Field(default=None, max_length=500)


class SettingsVersionOut(BaseModel):
    """One version of a KB's retrieval settings: who made it (`author_key_id`), when, why, and from what."""

    knowledge_base_id: str
    version: int
    # The settings of this version, defaults filled in.
    retrieval: KbRetrieval
    origin: SettingsOrigin
    reason: str
    author_key_id: str | None
    # The tune job whose recommendation this version applied (origin `tune`).
    tune_job_id: str | None
    # The version a revert brought back (origin `revert`).
    reverted_to: int | None
    # Whether the KB searches with this version now.
    current: bool
    created_at: UtcDateTime
