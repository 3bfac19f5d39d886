"""Indexes for the ledger's lookups that read whole tables, each of which grows with every upload ever made:

- `ix_jobs_document`: a batch's documents' ingest runs are marked running when it is claimed and done when it is
  live; each UPDATE read the whole jobs table (0.9 ms a statement at 7,000 uploads, growing after);
- `ix_jobs_status` and `ix_documents_status`: the worker's sweeper looks for overdue open jobs, expired leases and
  pending documents whose message may be lost, every 30 s, across KBs.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

# ix_jobs_document names all three columns of the ingest lookup: with only document_id in it, SQLite's planner
# (which keeps no statistics here) took ix_jobs_status instead, and in a bulk import every job is queued.
INDEXES = (
    ("ix_jobs_document", "jobs", ["document_id", "kind", "status"]),
    ("ix_jobs_status", "jobs", ["status"]),
    ("ix_documents_status", "documents", ["status"]),
)


def upgrade() -> None:
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)


def downgrade() -> None:
    for name, table, _ in INDEXES:
        op.drop_index(name, table_name=table)
