"""A run's candidates side by side: quality (mean KL against the original, lower is better)
against speed (predicted throughput per GPU, higher is better), and the frontier: the
candidates no other beats on both. Where a candidate has no price (no spec to price it with),
fewer bits per weight stands for more speed, so a frontier can still be drawn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deployments.quantization.models import Candidate

THROUGHPUT_KEY = "throughput_per_gpu"


def speed_of(candidate: Candidate) -> float:
    """Predicted throughput per GPU, or minus bits per weight where unpriced."""
    price = candidate.price or {}
    value = price.get(THROUGHPUT_KEY)
    return float(value) if isinstance(value, int | float) else -candidate.bits_per_weight


@dataclass(frozen=True)
class Comparison:
    candidates: tuple[Candidate, ...]
    frontier: tuple[Candidate, ...]
    baseline: Candidate | None  # every layer at the run's format (``_baseline``)

    def as_dict(self) -> dict[str, Any]:
        base = self.baseline
        on = {c.name for c in self.frontier}
        return {
            "baseline": base.name if base else "",
            "candidates": [
                {
                    "name": c.name,
                    "mean_kl": c.mean_kl,
                    "top1": c.top1,
                    "quantized_fraction": c.quantized_fraction,
                    "throughput_per_gpu": (c.price or {}).get(THROUGHPUT_KEY),
                    "kl_vs_baseline": (c.mean_kl - base.mean_kl) if base else None,
                    "speed_vs_baseline": (speed_of(c) - speed_of(base)) if base else None,
                    "on_frontier": c.name in on,
                }
                for c in self.candidates
            ],
        }


def compare(candidates: Sequence[Candidate]) -> Comparison:
    ordered = tuple(sorted(candidates, key=lambda c: (c.mean_kl, -speed_of(c), c.name)))
    frontier = tuple(
        c
        for c in ordered
        if not any(
            o is not c
            and o.mean_kl <= c.mean_kl
            and speed_of(o) >= speed_of(c)
            and (o.mean_kl < c.mean_kl or speed_of(o) > speed_of(c))
            for o in ordered
        )
    )
    return Comparison(ordered, frontier, _baseline(ordered))


def _baseline(candidates: Sequence[Candidate]) -> Candidate | None:
    """Every layer at the run's format (a recipe that keeps nothing and mixes nothing), else
    the candidate that quantizes the most."""
    plain = [c for c in candidates if not c.recipe.get("keep_bf16") and not c.recipe.get("formats")]
    pool = plain or list(candidates)
    return max(pool, key=lambda c: (c.quantized_fraction, speed_of(c)), default=None)
