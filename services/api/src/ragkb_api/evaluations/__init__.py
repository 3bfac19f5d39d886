"""Question sets (BEIR import/export) and evaluations of a KB's retrieval."""
