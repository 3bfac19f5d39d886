"""Metadata store: KBs, documents and jobs in SQL (SQLite by default, PostgreSQL by URL)."""
