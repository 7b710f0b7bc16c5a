"""Quantizing a model in the platform: runs, candidates, checkpoints as model sources."""
