"""Dify's External Knowledge API (/retrieval)."""
