"""The writers of quality gates: start a gate run on a canary's revision, an admin's override.

``start_gate`` checks the thresholds and the prompt set (a ``ServiceError`` names the field), that
the revision runs as a canary beside its baseline (both must answer for the KL comparison), stores
the gate as pending with an AuditEvent and a timeline line, and sends the
``deployments.run_quality_gate`` task by name after commit: the worker reaches the engines,
views never do. ``override_gate`` lets a failed gate's revision serve: admins only, with a
reason, audited.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from controlplane import audit, notify
from controlplane.access import Actor, NotFound, require_role
from controlplane.celery import app as celery_app
from controlplane.hygiene import text_problem
from controlplane.models import Role
from controlplane.services import Conflict, ServiceError
from deployments.endpoints import fields, recommend
from deployments.endpoints.models import Deployment, Revision
from deployments.endpoints.queries import get_deployment
from deployments.endpoints.timeline import record_event
from deployments.experiments import queries as experiment_queries
from deployments.experiments.benchmark import services as benchmarks
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import (
    Benchmark,
    Canary,
    CanaryStatus,
    QualityGate,
    QualityGateStatus,
)
from deployments.experiments.quality.gate import gate_of
from deployments.experiments.queries import running_canary
from runtime.quality import DEFAULT_MAX_MEAN_KL, DEFAULT_MIN_TOP1_AGREEMENT
from runtime.quality_run import builtin_prompts

__all__ = [
    "gates_of",
    "get_gate",
    "override_gate",
    "parse_jsonl",
    "start_experiment",
    "start_gate",
]

logger = logging.getLogger(__name__)
RUN_TASK = "deployments.run_quality_gate"
ACTIVE = (QualityGateStatus.PENDING, QualityGateStatus.RUNNING)
OVERRIDABLE = (QualityGateStatus.FAILED, QualityGateStatus.ERROR)
MAX_PROMPTS = 200
MAX_PROMPT_CHARS = 8000
MAX_NEW_TOKENS = (1, 512)
MAX_MEAN_KL_RANGE = (0.0, 10.0)


def snapshot(gate: QualityGate) -> dict[str, Any]:
    return {
        "revision": gate.revision.number,
        "baseline_revision": gate.baseline_revision.number,
        "max_mean_kl": gate.max_mean_kl,
        "min_top1_agreement": gate.min_top1_agreement,
        "prompt_set": gate.prompt_set,
        "status": gate.status,
    }


def parse_jsonl(text: str) -> list[str]:
    """A user's prompt set: one ``{"prompt": ...}`` (or ``{"text": ...}``) object per line."""
    prompts: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise ServiceError(f"line {number} is not JSON", field="prompts_jsonl") from None
        prompt = row.get("prompt", row.get("text")) if isinstance(row, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            raise ServiceError(
                f'line {number} needs a non-empty "prompt" string', field="prompts_jsonl"
            )
        problem = text_problem(prompt, MAX_PROMPT_CHARS)  # a JSON escape may hide a NUL
        if problem is not None:
            code, message = problem
            raise ServiceError(
                f"line {number}'s prompt {message}", field="prompts_jsonl", code=code
            )
        prompts.append(prompt)
    if not prompts:
        raise ServiceError("the JSONL holds no prompts", field="prompts_jsonl")
    if len(prompts) > MAX_PROMPTS:
        raise ServiceError(f"at most {MAX_PROMPTS} prompts", field="prompts_jsonl")
    return prompts


def _number(value: object, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ServiceError(f"{name} must be between {low:g} and {high:g}", field=name)
    return float(value)


def _candidate(deployment: Deployment, number: int) -> Canary:
    """The running canary of revision ``number``: the gate compares it with its baseline."""
    canary = running_canary(deployment, number=number)
    if canary is None:
        if not deployment.revisions.filter(number=number).exists():
            raise NotFound(f"revision {number} does not exist")
        raise Conflict(
            f"revision {number} is not running as a canary; a gate compares a canary's revision "
            "with the serving one (start a canary of it first)",
            code="not_a_canary",
        )
    return canary


@transaction.atomic
def start_gate(
    actor: Actor,
    deployment_id: uuid.UUID | str,
    revision: int,
    *,
    max_mean_kl: float = DEFAULT_MAX_MEAN_KL,
    min_top1_agreement: float = DEFAULT_MIN_TOP1_AGREEMENT,
    prompts_jsonl: str = "",
    max_new_tokens: int = 64,
) -> QualityGate:
    """A pending gate of the canary's revision ``revision`` against its baseline, run by a task."""
    require_role(actor, Role.DEVELOPER)
    max_mean_kl = _number(max_mean_kl, "max_mean_kl", *MAX_MEAN_KL_RANGE)
    min_top1_agreement = _number(min_top1_agreement, "min_top1_agreement", 0.0, 1.0)
    tokens = int(_number(max_new_tokens, "max_new_tokens", *MAX_NEW_TOKENS))
    if not isinstance(max_new_tokens, int):
        raise ServiceError("max_new_tokens must be a whole number", field="max_new_tokens")
    custom = bool(prompts_jsonl.strip())
    prompts = parse_jsonl(prompts_jsonl) if custom else builtin_prompts()
    deployment = get_deployment(actor, deployment_id)
    deployment = Deployment.objects.select_for_update(of=("self",)).get(pk=deployment.pk)
    canary = _candidate(deployment, revision)
    if canary.revision.gates.filter(status__in=ACTIVE).exists():
        raise Conflict(
            f"revision {revision}'s quality gate is already running", code="gate_running"
        )
    gate = QualityGate.objects.create(
        deployment=deployment, revision=canary.revision,
        baseline_revision=canary.baseline_revision, max_mean_kl=max_mean_kl,
        min_top1_agreement=min_top1_agreement, max_new_tokens=tokens,
        prompt_set="custom" if custom else "builtin", prompts=prompts, created_by=actor.label,
    )  # fmt: skip
    # A new gate judges afresh: the canary's recorded verdict is the last gate's.
    Canary.objects.filter(pk=canary.pk).update(gate_verdict=None)
    audit.record(actor, "quality_gate.start", gate, after=snapshot(gate))
    record_event(
        deployment, "info", "QualityGateQueued",
        f"quality gate of revision {revision} against revision "
        f"{canary.baseline_revision.number} queued by {actor.label} (mean KL <= "
        f"{max_mean_kl:g} nats, top-1 >= {min_top1_agreement:g}, "
        f"{len(prompts)} {'custom' if custom else 'built-in'} prompts)",
        revision, data={"gate": str(gate.pk)},
    )  # fmt: skip
    notify.publish_on_commit("deployment", str(deployment.pk))
    transaction.on_commit(lambda: _send_run(str(gate.pk)))
    return gate


@transaction.atomic
def start_experiment(
    actor: Actor,
    deployment_id: uuid.UUID | str,
    spec: dict[str, Any],
    *,
    weight: int,
    gate: bool = True,
    benchmark: bool = False,
    label: str = "",
) -> tuple[Canary, QualityGate | None, Benchmark | None]:
    """The optimizer's "Apply as a canary": ``spec`` fitted to the endpoint (its identity kept,
    ``recommend.fitted_spec``) as a canary at ``weight`` percent, with a gate at the default
    thresholds and a benchmark of the canary's revision, in one transaction: all or nothing.
    The gate and the benchmark wait in their queues until the canary's pool answers."""
    deployment = get_deployment(actor, deployment_id)
    canary = canary_services.start_canary(
        actor, deployment.pk, spec=recommend.fitted_spec(deployment, spec), weight=weight,
        message=recommend.optimizer_message(label or "recommended settings"),
    )  # fmt: skip
    number = canary.revision.number
    started = start_gate(actor, deployment.pk, number) if gate else None
    queued = (
        benchmarks.create_benchmark(
            actor, deployment.pk, profile={}, name=f"canary r{number}", revision=number
        )
        if benchmark
        else None
    )
    return canary, started, queued


def _send_run(gate_id: str) -> None:
    try:
        celery_app.send_task(RUN_TASK, args=[gate_id])
    except Exception as exc:  # the broker is down: the gate stays pending, shown as such
        logger.warning("quality gate %s not queued (%s)", gate_id, exc)


@transaction.atomic
def override_gate(
    actor: Actor, deployment_id: uuid.UUID | str, revision: int, *, reason: str
) -> QualityGate:
    """Let a revision whose gate failed (or could not run) serve: admins, with a reason."""
    require_role(actor, Role.ADMIN)
    reason = fields.clean_text(reason, "reason", fields.MESSAGE_MAX_LENGTH).strip()
    if not reason:
        raise ServiceError("say why the gate is overridden", field="reason")
    deployment = get_deployment(actor, deployment_id)
    deployment = Deployment.objects.select_for_update(of=("self",)).get(pk=deployment.pk)
    gate = _latest(deployment, revision)
    if gate.status not in OVERRIDABLE:
        raise Conflict(
            f"revision {revision}'s quality gate is {gate.status}; only a failed gate (or one "
            "that could not run) is overridden",
            code="not_overridable",
        )
    before = snapshot(gate)
    gate.status = QualityGateStatus.OVERRIDDEN
    gate.override_reason = reason
    gate.overridden_by = actor.label
    gate.save(update_fields=["status", "override_reason", "overridden_by"])
    Canary.objects.filter(revision=gate.revision, status=CanaryStatus.RUNNING).update(
        gate_verdict={"passed": True, "overridden": True, "gate": str(gate.pk), "reason": reason}
    )
    audit.record(
        actor, "quality_gate.override", gate, before=before,
        after={**snapshot(gate), "reason": reason},
    )  # fmt: skip
    record_event(
        deployment, "warning", "QualityGateOverridden",
        f"revision {revision}'s quality gate overridden by {actor.label}: {reason}",
        revision, data={"gate": str(gate.pk)},
    )  # fmt: skip
    notify.publish_on_commit("deployment", str(deployment.pk))
    return gate


def _revision(deployment: Deployment, number: int) -> Revision:
    found = deployment.revisions.filter(number=number).first()
    if found is None:
        raise NotFound(f"revision {number} does not exist")
    return found


def _latest(deployment: Deployment, number: int) -> QualityGate:
    gate = gate_of(_revision(deployment, number))
    if gate is None:
        raise NotFound(f"revision {number} has no quality gate")
    return gate


def get_gate(actor: Actor, deployment_id: uuid.UUID | str, revision: int) -> QualityGate:
    """Revision ``revision``'s gate (its latest run)."""
    return _latest(get_deployment(actor, deployment_id), revision)


def gates_of(actor: Actor, deployment_id: uuid.UUID | str) -> QuerySet[QualityGate]:
    """Every gate run of the endpoint, newest first."""
    return experiment_queries.gates_of(get_deployment(actor, deployment_id))
