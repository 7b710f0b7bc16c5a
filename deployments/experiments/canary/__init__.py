"""Canaries: the pure rules (judge, gate), the writers, the watch and the canary's pool."""
