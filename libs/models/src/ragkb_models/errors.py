"""Errors raised while preparing or loading a model. Part of the ragkb_core error hierarchy, so the services
map them like any other domain error."""

from __future__ import annotations

from ragkb_core.errors import RagkbError


class ModelError(RagkbError):
    """A model cannot be prepared or loaded: a deployment problem, never fixed by retrying."""

    title = "Model unavailable"


class ModelFileError(ModelError):
    """The packaged weights are not the file this code was written for (wrong version, corrupt, truncated)."""

    title = "Model file invalid"
