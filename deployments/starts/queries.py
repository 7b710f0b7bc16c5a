"""Reads of replica starts: an endpoint's latest, for its page and the API."""

from __future__ import annotations

from typing import Any

from deployments.endpoints.models import Deployment
from deployments.starts.models import ReplicaStart
from runtime.startup import PHASE_LABELS

RECENT_STARTS = 20


def recent_starts(deployment: Deployment, limit: int = RECENT_STARTS) -> list[ReplicaStart]:
    """Its latest starts, the most recent first."""
    return list(ReplicaStart.objects.filter(deployment=deployment).order_by("-ready_at")[:limit])


def start_bars(starts: list[ReplicaStart]) -> list[dict[str, Any]]:
    """Each start as a bar: its phases as segments, widths in percent of the longest start's
    phases (so bars compare), and the phase's seconds for its label."""
    longest = max((sum(s.phases.values()) for s in starts), default=0.0) or 1.0
    bars = []
    for start in starts:
        segments, at = [], 0.0
        for phase, seconds in start.ordered_phases():
            width = 100.0 * seconds / longest
            # An SVG rectangle's x and width (the CSP allows no style attribute).
            segments.append(
                {
                    "phase": phase,
                    "label": PHASE_LABELS[phase],
                    "seconds": seconds,
                    "x": round(at, 2),
                    "width": round(width, 2),
                }
            )
            at += width
        bars.append({"start": start, "segments": segments, "seconds": sum(start.phases.values())})
    return bars
