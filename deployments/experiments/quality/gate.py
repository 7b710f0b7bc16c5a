"""The quality gate's rule: may a revision's settings serve every request?

A revision's latest ``QualityGate`` is its gate (``runtime.quality`` computes the figures; the
run is ``deployments.experiments.quality.run``'s). A candidate whose gate has not passed cannot be
promoted from a canary (``deployments.experiments.canary.rules.gate_allows`` asks here) nor become
the target outside one: a rollback to it, or a settings change back to the same settings, is refused
too (services ask ``refusal_for_spec``). Judged by settings (the spec hash), because a rollback
makes a new revision with the settings of the one it restores. No gate at all: no check (a gate is
opt-in per revision). Passed or overridden by an admin (with a reason, audited): allowed.
"""

from __future__ import annotations

from deployments.endpoints.models import Deployment, Revision
from deployments.experiments.models import QualityGate, QualityGateStatus

ALLOWED = (QualityGateStatus.PASSED, QualityGateStatus.OVERRIDDEN)


def gate_of(revision: Revision) -> QualityGate | None:
    """The revision's gate: its latest."""
    return revision.gates.order_by("-created_at").first()


def refusal(gate: QualityGate | None) -> str:
    """Why ``gate`` keeps its revision from serving everything; "" when it does not."""
    if gate is None or gate.status in ALLOWED:
        return ""
    number = gate.revision.number
    if gate.status == QualityGateStatus.FAILED:
        reasons = "; ".join((gate.results or {}).get("reasons", [])) or "failed"
        return f"revision {number}'s quality gate failed ({reasons})"
    if gate.status == QualityGateStatus.ERROR:
        return f"revision {number}'s quality gate could not run ({gate.error}); run it again"
    return f"revision {number}'s quality gate has not judged yet ({gate.status})"


def refusal_for_revision(revision: Revision) -> str:
    return refusal(gate_of(revision))


def refusal_for_spec(deployment: Deployment, spec_hash: str) -> str:
    """As ``refusal_for_revision`` for the latest gated revision of ``deployment`` with these
    settings (a rollback, or a change back to gated settings); "" when none was gated."""
    gate = (
        QualityGate.objects.select_related("revision")
        .filter(deployment=deployment, revision__spec_hash=spec_hash)
        .order_by("-created_at")
        .first()
    )
    return refusal(gate)
