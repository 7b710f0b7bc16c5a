"""What an endpoint's own traffic teaches the optimizer when it recommends for that endpoint.

The correction in force on the endpoint's performance model
(``deployments.autoscaling.queries.model_accuracy``: measured / predicted TTFT and ITL p90, the
SLO autoscaler's or fitted from the samples) scales every candidate's predicted TTFT and ITL,
the search aims at the targets divided by it (as the SLO autoscaler does, so a pick that meets
the targets meets them as the endpoint runs), and the answer says so (``correction``, a note, a
reason per candidate).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from django.utils import timezone

from controlplane.services import ServiceError
from deployments.autoscaling.queries import model_accuracy
from deployments.endpoints.models import Deployment
from runtime.catalog import get_model
from runtime.optimize import OptimizeRequest, Slo

__all__ = ["apply_correction", "corrected_slo", "learned_correction", "same_model"]


def learned_correction(deployment: Deployment, query: OptimizeRequest) -> dict[str, Any] | None:
    """The endpoint's correction in force ({"deployment", "revision", "factors"}); None when
    its model is uncorrected. An endpoint serving another model is refused: its traffic says
    nothing of this one."""
    revision = deployment.current_revision or deployment.target_revision
    source = ((revision.spec if revision is not None else {}).get("model") or {}).get("source")
    if source is not None and not same_model(source, query.model):
        raise ServiceError(
            f"endpoint {deployment.slug} serves {source}; this query is for {query.model}",
            field="deployment_id",
        )
    accuracy = model_accuracy(deployment, timezone.now())
    if accuracy is None or not accuracy.correction:
        return None
    return {
        "deployment": deployment.slug,
        "revision": accuracy.revision,
        "factors": {metric: round(v, 4) for metric, v in accuracy.correction.items()},
    }


def same_model(a: str, b: str) -> bool:
    """Two names of one model: the same text, or one catalogue row (an id, a repo, an alias)."""
    known_a, known_b = get_model(a), get_model(b)
    return a == b or (known_a is not None and known_b is not None and known_a.id == known_b.id)


def corrected_slo(slo: Slo, factors: dict[str, float]) -> Slo:
    """The targets the model must meet for the endpoint to meet ``slo``: each divided by the
    measured/predicted factor of its latency (end to end by the larger)."""
    ttft, itl = factors.get("ttft", 1.0), factors.get("itl", 1.0)
    return replace(
        slo,
        ttft_p90_s=slo.ttft_p90_s / ttft,
        itl_p90_s=slo.itl_p90_s / itl,
        e2e_p90_s=slo.e2e_p90_s / max(ttft, itl) if slo.e2e_p90_s is not None else None,
        tpot_mean_s=slo.tpot_mean_s / itl if slo.tpot_mean_s is not None else None,
    )


def apply_correction(data: dict[str, Any], learned: dict[str, Any]) -> None:
    """Every candidate's predicted latencies scaled by the endpoint's factors, with a reason
    saying so, and the correction and a note in the answer."""
    ttft, itl = learned["factors"].get("ttft", 1.0), learned["factors"].get("itl", 1.0)
    said = ", ".join(f"{m.upper()} {100 * (v - 1):+.0f}%" for m, v in learned["factors"].items())
    reason = f"latencies corrected by {learned['deployment']}'s measured traffic ({said})"
    candidates = [*data["ranked"], *data["pareto"], *(w["candidate"] for w in data["waterfall"])]
    for candidate in {id(c): c for c in [*candidates, data["best"]] if c is not None}.values():
        predicted = candidate["predicted"]
        decode = predicted["e2e_p90_s"] - predicted["ttft_p90_s"]
        predicted["ttft_p90_s"] = round(predicted["ttft_p90_s"] * ttft, 6)
        predicted["itl_p90_s"] = round(predicted["itl_p90_s"] * itl, 6)
        predicted["e2e_p90_s"] = round(predicted["ttft_p90_s"] + decode * itl, 6)
        candidate["reasons"] = [*candidate["reasons"], reason]
    data["correction"] = learned
    data["notes"] = [
        *data["notes"],
        f"The model is corrected by endpoint {learned['deployment']} (r{learned['revision']}): "
        f"its measured traffic ran {said} against the prediction; the search aimed at the "
        "targets divided by that, and the predicted latencies include it.",
    ]
