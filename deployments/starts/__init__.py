"""Replica starts: each engine replica's cold start, phase by phase (issue 29)."""
