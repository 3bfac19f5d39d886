"""Alembic environment: runs on the connection handed in by ragkb_store.db.engine.migrate_to_head."""

from __future__ import annotations

from alembic import context

from ragkb_store.db.models import Base

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
