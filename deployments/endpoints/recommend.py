"""The optimizer for the API, the console page and the wizard: one service, three front-ends.

``recommend`` runs ``runtime.optimize`` (within a cluster's free GPUs when one is named; from
an endpoint's serving revision, the waterfall's start, when one is named) and, when asked,
confirms the top picks by a short simulated run (``runtime.confirm``) and ranks them by what the
runs measured; it answers the JSON-ready data of ``POST /api/v1/optimize``. ``apply_candidate``
makes a recommended spec a new revision of an existing endpoint through
``services.update_settings``, with a message saying it came from the optimizer. Creating an
endpoint from a candidate needs nothing of its own: it is ``services.create_deployment`` with the
candidate's spec.

Asked for one endpoint (``deployment_id``), ``recommend`` also applies the correction that
endpoint's own traffic taught the model (``deployments.endpoints.learned``).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from controlplane.access import Actor
from controlplane.services import ServiceError
from deployments.clusters import queries as cluster_queries
from deployments.endpoints import queries, services
from deployments.endpoints.learned import apply_correction, corrected_slo, learned_correction
from deployments.endpoints.models import Deployment, Revision
from runtime.confirm import DEFAULT_TOP, ConfirmError, attach_measurements, confirm_top
from runtime.optimize import OptimizeError, OptimizeRequest, result_dict
from runtime.optimize import optimize as run_optimizer
from runtime.spec import RuntimeSpec

# Settings that belong to the endpoint, not to a traffic profile: applying a recommendation
# keeps them (its served name is what callers ask for, its secret opens the weights, its runtime
# group pins the image and environment it was tested with).
KEPT_MODEL_FIELDS = (
    "served_name",
    "revision",
    "hf_token_secret",
    "trust_remote_code",
    "architecture",
)
KEPT_GROUPS = ("runtime",)


def recommend(
    actor: Actor,
    query: OptimizeRequest,
    *,
    cluster_id: uuid.UUID | str | None = None,
    confirm: bool = False,
    confirm_count: int = DEFAULT_TOP,
    deployment_id: uuid.UUID | str | None = None,
) -> dict[str, Any]:
    """Ranked candidates with predicted figures and reasons (ServiceError naming the field)."""
    # The endpoint asked for: the waterfall starts from its serving revision, and what its own
    # traffic taught the model corrects the search.
    endpoint = queries.get_deployment(actor, deployment_id) if deployment_id else None
    learned = learned_correction(endpoint, query) if endpoint is not None else None
    if endpoint is not None:
        query = replace(query, current=serving_spec(endpoint))
    if learned is not None:
        query = replace(query, slo=corrected_slo(query.slo, learned["factors"]))
    if cluster_id is not None:
        cluster = cluster_queries.get_cluster(actor, cluster_id)
        query = replace(query, gpu_counts=free_gpus(cluster.gpu_inventory))
    try:
        result = run_optimizer(query)
    except OptimizeError as exc:
        field = "gpus" if "GPU" in str(exc) else "model"
        raise ServiceError(str(exc), field=field) from exc
    data = result_dict(result)
    if confirm:
        try:
            attach_measurements(data, confirm_top(query, result, confirm_count), query.objective)
        except ConfirmError as exc:
            raise ServiceError(str(exc), field="confirm") from exc
    if learned is not None:
        apply_correction(data, learned)
    return data


def serving_spec(deployment: Deployment) -> RuntimeSpec | None:
    """The spec of the revision the endpoint serves (the one it is rolling to, before any has
    come up); None when it has none or its stored spec no longer parses."""
    revision = deployment.current_revision or deployment.target_revision
    if revision is None:
        return None
    try:
        return RuntimeSpec.model_validate(revision.spec)
    except ValidationError:
        return None


def free_gpus(inventory: dict[str, Any] | None) -> dict[str, int]:
    """Free GPUs per type from a cluster's last observation; empty when never observed."""
    if not inventory or inventory.get("error"):
        return {}
    summary = inventory.get("gpus") or {}
    return {gpu: int(row.get("free", 0)) for gpu, row in summary.items()}


def optimizer_message(label: str) -> str:
    return f"from the optimizer: {label}"


def apply_candidate(
    actor: Actor, deployment_id: uuid.UUID | str, spec: dict[str, Any], label: str
) -> Revision:
    """`spec` (a recommendation for the endpoint's model) as the endpoint's next revision.

    The endpoint keeps its own identity and runtime settings (``KEPT_MODEL_FIELDS``,
    ``KEPT_GROUPS``); a recommendation for another model is refused, since it would silently
    change what the endpoint serves.
    """
    deployment = queries.get_deployment(actor, deployment_id)
    target = deployment.target_revision
    return services.update_settings(
        actor,
        deployment.pk,
        spec=fitted_spec(deployment, spec),
        base_revision=target.number if target is not None else 0,
        message=optimizer_message(label),
    )


def fitted_spec(deployment: Deployment, spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` fitted to the endpoint: its identity and runtime settings kept (as
    ``apply_candidate`` and the optimizer's "Apply as a canary" both need)."""
    target = deployment.target_revision
    current: dict[str, Any] = dict(target.spec) if target is not None else {}
    model = dict(spec.get("model") or {})
    current_model = current.get("model") or {}
    if current_model.get("source") not in (None, model.get("source")):
        raise ServiceError(
            f"endpoint {deployment.slug} serves {current_model.get('source')}; this "
            f"recommendation is for {model.get('source')}",
            field="deployment",
        )
    for name in KEPT_MODEL_FIELDS:
        if current_model.get(name) is not None:
            model[name] = current_model[name]
    kept = {group: current[group] for group in KEPT_GROUPS if group in current}
    return {**spec, **kept, "model": model}
