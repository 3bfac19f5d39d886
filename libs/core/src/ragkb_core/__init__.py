"""Shared core of ragkb: what several processes need and nothing else."""
