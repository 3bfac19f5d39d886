"""Request and response shapes of sources: what each connector reads, its credentials and its schedule."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, SecretStr, StringConstraints, field_validator, model_validator

from ragkb_api.fields import UtcDateTime

# A source's name prefixes its documents' source_ids (`name:key`): short, and free of the separator.
SourceName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")]
DEFAULT_CONTENT_TYPES = ["text/html", "text/plain", "text/markdown", "application/pdf"]


class FolderConfig(BaseModel):
    kind: Literal["folder"]
    # Absolute, and under one of RAGKB_SOURCES__FOLDER_ROOTS.
    path: str = Field(min_length=1, max_length=4096)


class WebConfig(BaseModel):
    kind: Literal["web"]
    start_url: str = Field(pattern=r"^https?://", max_length=2048)
    max_depth: int = Field(default=2, ge=0, le=20)
    max_pages: int = Field(default=200, ge=1, le=10_000)
    content_types: list[str] = Field(default_factory=lambda: list(DEFAULT_CONTENT_TYPES), min_length=1)

    @field_validator("content_types")
    @classmethod
    def _lower_case(cls, types: list[str]) -> list[str]:
        return [media_type.strip().lower() for media_type in types]


class GitConfig(BaseModel):
    kind: Literal["git"]
    # An http(s) URL, or a local path under RAGKB_SOURCES__FOLDER_ROOTS.
    repository: str = Field(min_length=1, max_length=2048)
    branch: str = Field(default="main", pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
    # fnmatch patterns on the file's path in the repository (`*` crosses `/`); none: every file.
    paths: list[str] = Field(default_factory=list, max_length=50)


class S3Config(BaseModel):
    kind: Literal["s3"]
    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    prefix: str = Field(default="", max_length=1024)
    # An S3-compatible server (MinIO, Ceph...); unset: AWS S3.
    endpoint_url: str | None = Field(default=None, pattern=r"^https?://", max_length=2048)
    region: str = Field(default="us-east-1", pattern=r"^[a-z0-9-]{1,50}$")


AnyConfig = FolderConfig | WebConfig | GitConfig | S3Config
SourceConfig = Annotated[AnyConfig, Field(discriminator="kind")]


class SourceCredentials(BaseModel):
    """Sent as an Authorization header to a web site or a Git server over HTTP: a bearer `token`, or a
    `username` and `password`; for a bucket, `username` is the access key id and `password` the secret access
    key. Stored encrypted, never shown again."""

    token: SecretStr | None = None
    username: str | None = Field(default=None, max_length=200)
    password: SecretStr | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> SourceCredentials:
        if self.token is None and (self.username is None or self.password is None):
            raise ValueError("give a `token`, or a `username` and a `password`")
        return self

    def plain(self) -> dict[str, str]:
        values = {"token": self.token, "username": self.username, "password": self.password}
        return {
            name: value.get_secret_value() if isinstance(value, SecretStr) else value
            for name, value in values.items()
            if value is not None
        }


class Schedule(BaseModel):
    """When a source runs by itself: every `interval_s` seconds, or at the times of a `cron` expression (UTC);
    neither: only when asked (POST .../run)."""

    # At least RAGKB_SOURCES__MIN_INTERVAL_S (checked by the service: the bound is a setting).
    interval_s: int | None = Field(default=None, ge=1)
    cron: str | None = Field(default=None, min_length=9, max_length=200)

    @model_validator(mode="after")
    def _at_most_one(self) -> Schedule:
        if self.interval_s is not None and self.cron is not None:
            raise ValueError("a source has an `interval_s` or a `cron`, not both")
        return self


class SourceCreate(Schedule):
    name: SourceName
    config: SourceConfig
    credentials: SourceCredentials | None = None


class SourceOut(BaseModel):
    id: str
    knowledge_base_id: str
    name: str
    kind: str
    config: AnyConfig
    # Whether credentials are stored; they themselves are never shown.
    has_credentials: bool
    interval_s: int | None
    cron: str | None
    next_run_at: UtcDateTime | None
    last_run_at: UtcDateTime | None
    last_status: str | None
    last_error: str | None
    last_job_id: str | None
    running: bool
    created_at: UtcDateTime
