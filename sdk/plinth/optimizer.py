"""``client.optimize(...)``: the optimizer's ranked settings (a dry run: it creates nothing), and
:func:`fit_candidate`, which fits a pick to an existing endpoint before it is saved as a revision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from plinth import models
from plinth.errors import FieldError, ValidationFailed
from plinth.resources import Resource
from plinth.transport import API, clean, request

# The endpoint's own settings that applying a recommendation keeps: the same lists as the
# server's deployments/endpoints/recommend.py (KEPT_MODEL_FIELDS, KEPT_GROUPS), which the console's
# "Apply" uses; the SDK installs without Django, so they are repeated here and a test keeps them
# equal.
KEPT_MODEL_FIELDS = (
    "served_name",
    "revision",
    "hf_token_secret",
    "trust_remote_code",
    "architecture",
)
KEPT_GROUPS = ("runtime",)

Objective = Literal["cost", "throughput"]


class OptimizerMismatch(ValidationFailed):
    """A recommendation for another model than the endpoint serves (applying it would silently
    change what the endpoint answers with)."""


def optimizer_message(label: str) -> str:
    """The revision message of an applied pick, as the console writes it."""
    return f"from the optimizer: {label}"


def fit_candidate(
    current: Mapping[str, Any], candidate: Mapping[str, Any], *, endpoint: str = "the endpoint"
) -> dict[str, Any]:
    """A candidate's spec fitted to an endpoint whose settings are ``current``: the endpoint keeps
    its identity and runtime settings; :class:`OptimizerMismatch` for another model's pick."""
    model = dict(candidate.get("model") or {})
    current_model = current.get("model") or {}
    if current_model.get("source") not in (None, model.get("source")):
        message = (
            f"{endpoint} serves {current_model.get('source')}; this recommendation is for "
            f"{model.get('source')}"
        )
        raise OptimizerMismatch(
            message,
            code="model_mismatch",
            fields=[FieldError("model", "model_mismatch", message, "optimize for its model")],
        )
    for name in KEPT_MODEL_FIELDS:
        if current_model.get(name) is not None:
            model[name] = current_model[name]
    kept = {group: current[group] for group in KEPT_GROUPS if group in current}
    return {**candidate, **kept, "model": model}


class Optimizer(Resource):
    """``client.optimize(model, ...)``: ranked settings for a traffic profile with predicted
    TTFT, ITL, throughput and cost and their reasons (``confirm``: the top picks also measured
    by a short simulated run). A dry run any member may make; pass a whole
    :class:`~plinth.models.OptimizeIn` instead of ``model`` to send it as it is."""

    def __call__(
        self,
        model: str | models.OptimizeIn,
        *,
        gpus: Sequence[str] | None = None,
        traffic: models.TrafficIn | Mapping[str, Any] | None = None,
        slo: models.SloIn | Mapping[str, Any] | None = None,
        limits: models.LimitsIn | Mapping[str, Any] | None = None,
        objective: Objective | None = None,
        cluster_id: str | None = None,
        confirm: bool | None = None,
        confirm_top: int | None = None,
        architecture: models.Architecture | Mapping[str, Any] | None = None,
        deployment_id: str | None = None,
    ) -> models.OptimizeOut:
        if isinstance(model, models.OptimizeIn):
            asked = model
        else:
            fields = {
                "model": model,
                "gpus": list(gpus) if gpus is not None else None,
                "traffic": traffic,
                "slo": slo,
                "limits": limits,
                "objective": objective,
                "cluster_id": cluster_id,
                "confirm": confirm,
                "confirm_top": confirm_top,
                "architecture": architecture,
                "deployment_id": deployment_id,
            }
            asked = models.OptimizeIn.model_validate(clean(fields))
        # Unset optional figures are left out rather than sent as null: the server's defaults
        # (and its rule that rate and concurrency are one or the other) then apply.
        body = asked.model_dump(mode="json", by_alias=True, exclude_none=True)
        return cast(
            "models.OptimizeOut",
            self._c._call(request("POST", f"{API}/optimize", json=body, model=models.OptimizeOut)),
        )
