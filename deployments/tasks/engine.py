"""Tasks that drive endpoints towards their desired state (reconcile, sweep, probe, autoscale)."""

from __future__ import annotations

__all__: list[str] = []
