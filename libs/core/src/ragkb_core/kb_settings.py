"""Per-KB settings that several processes read: the api validates and stores them, the worker applies them.

Stored as JSON on the KB row; the defaults here are the only chunking defaults."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field, field_validator, model_validator

MAX_NOISE_PATTERNS = 50
MAX_PATTERN_CHARS = 500


class KbChunking(BaseModel):
    """How a KB's documents are cut. Changing it applies to documents ingested afterwards."""

    target_tokens: int = Field(default=256, ge=16, le=510)
    max_tokens: int = Field(default=400, ge=16, le=510)
    overlap_tokens: int = Field(default=32, ge=0, le=255)
    # Lines matching any of these regular expressions (boilerplate: page headers, disclaimers) are dropped.
    noise_patterns: list[str] = Field(default_factory=list, max_length=MAX_NOISE_PATTERNS)

    @field_validator("noise_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if len(pattern) > MAX_PATTERN_CHARS:
                raise ValueError(f"a noise pattern may have at most {MAX_PATTERN_CHARS} characters")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
        return patterns

    @model_validator(mode="after")
    def _sizes_are_ordered(self) -> KbChunking:
        if self.target_tokens > self.max_tokens:
            raise ValueError("target_tokens must not exceed max_tokens")
        if self.overlap_tokens >= self.target_tokens:
            raise ValueError("overlap_tokens must be smaller than target_tokens")
        return self

    def compiled_noise_patterns(self) -> list[re.Pattern[str]]:
        return [re.compile(pattern) for pattern in self.noise_patterns]
