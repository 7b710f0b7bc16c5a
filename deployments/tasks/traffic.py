"""Tasks fed by the gateway: usage flush from Redis to UsageRecord, scale-from-zero wake-ups."""

from __future__ import annotations

__all__: list[str] = []
