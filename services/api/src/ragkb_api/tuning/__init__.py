"""Per-KB tuning jobs and the versions of a KB's retrieval settings."""
