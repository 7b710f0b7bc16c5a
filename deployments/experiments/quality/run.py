"""Running one quality gate: claim it, score the baseline's answers under both revisions, judge.

Called by the ``deployments.run_quality_gate`` task. The claim is a conditional UPDATE (pending ->
running) that must change exactly one row, so a message delivered twice runs the gate once. The
worker calls the two revisions' routers (the endpoint's, serving the baseline, and the canary
pool's) on SGLang's native ``/generate`` with the endpoint's engine key: ``runtime.quality_run``
does the teacher-forced scoring and ``runtime.quality`` the KL math and verdict. The figures,
the per-prompt summaries and the worst prompts with their text are stored on the gate; the
verdict is copied to the running canary (``Canary.gate_verdict``), which its promotion reads.
"""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from controlplane import audit, notify
from controlplane.access import system_actor
from controlplane.crypto import engine_api_key
from deployments.endpoints.timeline import record_event
from deployments.experiments.models import Canary, CanaryStatus, QualityGate, QualityGateStatus
from runtime.client import RuntimeUnavailable
from runtime.quality import GateThresholds, QualityReport
from runtime.quality_run import QualityRun, QualityRunError, run_quality

logger = logging.getLogger(__name__)
PROMPT_SHOWN_CHARS = 500  # per-prompt summaries keep this much of each prompt's text


class GateNotRunnable(Exception):
    """One of the two revisions has no router answering (the canary ended, a pool not ready)."""


WAITING = "waiting"


def run_gate(gate_id: str, *, wait: bool = False) -> str:
    """Run a pending gate to its verdict; the status it ended in ("skipped" if not pending).

    With ``wait``, a gate whose canary still runs but whose pool is not ready yet is left
    pending and ``WAITING`` returned (the task asks again later): a gate started with its canary
    (the optimizer's "Apply as a canary") waits for the pool instead of failing."""
    if wait and _pool_starting(gate_id):
        return WAITING
    claimed = QualityGate.objects.filter(pk=gate_id, status=QualityGateStatus.PENDING).update(
        status=QualityGateStatus.RUNNING, started_at=timezone.now()
    )
    if claimed != 1:
        return "skipped"
    gate = QualityGate.objects.select_related(
        "deployment__organization", "revision", "baseline_revision"
    ).get(pk=gate_id)
    record_event(
        gate.deployment, "info", "QualityGateStarted",
        f"quality gate of revision {gate.revision.number} against revision "
        f"{gate.baseline_revision.number} started",
        gate.revision.number, data={"gate": str(gate.pk)},
    )  # fmt: skip
    try:
        report = run_quality(_run_of(gate))
    except (GateNotRunnable, QualityRunError, RuntimeUnavailable, ValueError) as exc:
        return _finish(gate, None, str(exc))
    except Exception as exc:  # never leave a gate running
        logger.exception("quality gate %s failed", gate_id)
        return _finish(gate, None, f"the run failed: {type(exc).__name__}")
    return _finish(gate, report, "")


def _pool_starting(gate_id: str) -> bool:
    """The gate is pending and its canary runs, with no ready replica (or router) yet."""
    gate = QualityGate.objects.filter(pk=gate_id, status=QualityGateStatus.PENDING).first()
    if gate is None:
        return False
    canary = Canary.objects.filter(
        deployment_id=gate.deployment_id, revision_id=gate.revision_id,
        status=CanaryStatus.RUNNING,
    ).first()  # fmt: skip
    return canary is not None and (canary.ready_replicas < 1 or not canary.router_url)


def _urls(gate: QualityGate) -> tuple[str, str]:
    """The baseline's router (the endpoint's, while it serves the baseline) and the canary's."""
    deployment = gate.deployment
    deployment.refresh_from_db()
    if deployment.current_revision_id != gate.baseline_revision_id or not deployment.router_url:
        raise GateNotRunnable(
            f"revision {gate.baseline_revision.number} (the baseline) is not serving"
        )
    canary = Canary.objects.filter(
        deployment=deployment, revision=gate.revision, status=CanaryStatus.RUNNING
    ).first()
    if canary is None or not canary.router_url or canary.ready_replicas < 1:
        raise GateNotRunnable(
            f"revision {gate.revision.number}'s canary pool is not running or not ready"
        )
    return deployment.router_url, canary.router_url


def _run_of(gate: QualityGate) -> QualityRun:
    baseline, candidate = _urls(gate)
    return QualityRun(
        baseline_url=baseline,
        candidate_url=candidate,
        prompts=gate.prompt_texts(),
        max_new_tokens=gate.max_new_tokens,
        thresholds=GateThresholds(gate.max_mean_kl, gate.min_top1_agreement),
        api_key=engine_api_key(str(gate.deployment_id)),
    )


def results_of(report: QualityReport) -> dict[str, Any]:
    """What a gate stores: the report's figures and worst prompts, and every prompt's summary."""
    per_prompt = []
    for score in report.prompts:
        row = score.as_dict()
        row["prompt"] = row["prompt"][:PROMPT_SHOWN_CHARS]
        per_prompt.append(row)
    return {**report.as_dict(), "per_prompt": per_prompt}


def _finish(gate: QualityGate, report: QualityReport | None, error: str) -> str:
    if report is None:
        status = QualityGateStatus.ERROR
    else:
        gate.results = results_of(report)
        status = QualityGateStatus.PASSED if report.verdict().passed else QualityGateStatus.FAILED
    gate.status = status
    gate.error = error
    gate.finished_at = timezone.now()
    gate.save(update_fields=["status", "results", "error", "finished_at"])
    number = gate.revision.number
    if report is not None:
        reasons = list(report.verdict().reasons)
        verdict: dict[str, Any] = {
            "passed": status == QualityGateStatus.PASSED,
            "gate": str(gate.pk),
            "mean_kl": report.mean_kl,
            "top1_agreement": report.top1_agreement,
            "reasons": reasons,
        }
        Canary.objects.filter(revision=gate.revision, status=CanaryStatus.RUNNING).update(
            gate_verdict=verdict
        )
        message = (
            f"quality gate of revision {number}: mean KL {report.mean_kl:.4f} nats, top-1 "
            f"agreement {report.top1_agreement:.3f} over {report.tokens} tokens; "
            + ("passed" if verdict["passed"] else "failed: " + "; ".join(reasons))
        )
    else:
        message = f"quality gate of revision {number} could not run: {error}"
    passed = status == QualityGateStatus.PASSED
    record_event(
        gate.deployment, "info" if passed else "error",
        {"passed": "QualityGatePassed", "failed": "QualityGateFailed"}.get(
            status, "QualityGateError"
        ),
        message, number, data={"gate": str(gate.pk)},
    )  # fmt: skip
    audit.record(
        system_actor(gate.deployment.organization), "quality_gate.finish", gate,
        before={"status": QualityGateStatus.RUNNING},
        after={"status": status, "mean_kl": report.mean_kl if report else None},
    )  # fmt: skip
    notify.publish_on_commit("deployment", str(gate.deployment_id))
    return str(status)
