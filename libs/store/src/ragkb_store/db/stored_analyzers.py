"""One rewrite of every KB analyzer the database stores, for the migrations that change what a stored one means
(0010: analyzer version 2; 0017: BM25's k1 and b per KB). An analyzer is stored in three places, each naming the
terms of an index that exists or is being built: the KB's own, its rollback target's
(`index_state.previous_settings`) and a re-index job's under way (`params.settings`).

Migrations that ran keep calling this: change it only in ways that leave their results as they were."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

_KNOWLEDGE_BASES = sa.table(
    "knowledge_bases", sa.column("id", sa.String), sa.column("analyzer", sa.JSON), sa.column("index_state", sa.JSON)
)
_JOBS = sa.table("jobs", sa.column("id", sa.String), sa.column("params", sa.JSON))


def rewrite_stored_analyzers(connection: sa.Connection, change: Callable[[Any], Any]) -> None:
    """Replace each stored analyzer (a dict, or whatever a damaged row holds) by `change(analyzer)`."""
    kbs = sa.select(_KNOWLEDGE_BASES.c.id, _KNOWLEDGE_BASES.c.analyzer, _KNOWLEDGE_BASES.c.index_state)
    for kb_id, analyzer, index_state in connection.execute(kbs).all():
        values = {
            "analyzer": change(analyzer),
            "index_state": _with_built_analyzer(index_state, "previous_settings", change),
        }
        connection.execute(_KNOWLEDGE_BASES.update().where(_KNOWLEDGE_BASES.c.id == kb_id).values(**values))
    for job_id, params in connection.execute(sa.select(_JOBS.c.id, _JOBS.c.params)).all():
        if isinstance(params, dict) and "settings" in params:
            rewritten = _with_built_analyzer(params, "settings", change)
            connection.execute(_JOBS.update().where(_JOBS.c.id == job_id).values(params=rewritten))


def _with_built_analyzer(holder: Any, key: str, change: Callable[[Any], Any]) -> Any:
    """`holder[key]` is a BuildSettings (chunking, analyzer, embedding model) or absent."""
    if not isinstance(holder, dict) or not isinstance(holder.get(key), dict):
        return holder
    settings = holder[key]
    return {**holder, key: {**settings, "analyzer": change(settings.get("analyzer", {}))}}
