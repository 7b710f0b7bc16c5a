"""The optimizer's answer as plain data, for the REST API and the command line's ``--json``."""

from __future__ import annotations

from typing import Any

from runtime.optimize.types import Candidate, OptimizeResult


def candidate_dict(candidate: Candidate) -> dict[str, Any]:
    p = candidate.prediction
    return {
        "label": candidate.label,
        "spec": candidate.spec.model_dump(mode="json", exclude_defaults=True),
        "predicted": {
            "rate_rps": round(p.rate_rps, 4),
            "capacity_rps": round(p.capacity_rps, 4),
            "output_tokens_per_s": round(p.output_tokens_per_s, 1),
            "tokens_per_s_per_gpu": round(p.tokens_per_s_per_gpu, 1),
            "ttft_p90_s": round(p.ttft_p90_s, 4),
            "itl_p90_s": round(p.itl_p90_s, 5),
            "e2e_p90_s": round(p.e2e_p90_s, 3),
            "gpus": p.gpus,
            "cost_per_hour": p.cost_per_hour,
            "meets_slo": p.meets_slo,
        },
        "features": sorted(candidate.features),
        "reasons": list(candidate.reasons),
        "warnings": [issue.as_dict() for issue in candidate.warnings],
    }


def result_dict(result: OptimizeResult) -> dict[str, Any]:
    """The whole answer as JSON-ready data (the REST response and `--json`)."""
    return {
        "rate_rps": round(result.rate_rps, 4),
        "evaluated": result.evaluated,
        "best": candidate_dict(result.best) if result.best else None,
        "ranked": [candidate_dict(c) for c in result.ranked],
        "pareto": [candidate_dict(c) for c in result.pareto],
        "waterfall": [
            {"step": w.step, "candidate": candidate_dict(w.candidate) if w.candidate else None}
            for w in result.waterfall
        ],
        "notes": list(result.notes),
    }
