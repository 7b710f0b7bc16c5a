"""What the quality gate tests share: a gate left as its run would leave it (no engines)."""

from __future__ import annotations

from django.utils import timezone

from deployments.models import QualityGate, QualityGateStatus

FAILED_RESULTS = {
    "passed": False,
    "reasons": ["mean KL 0.0912 nats exceeds 0.05"],
    "mean_kl": 0.0912,
    "p99_kl": 0.41,
    "top1_agreement": 0.87,
    "worst_prompts": [{"index": 3, "prompt": "Translate to French", "mean_kl": 0.2}],
}


def finish(gate: QualityGate, status: str = QualityGateStatus.FAILED) -> QualityGate:
    """``gate`` judged: what ``deployments.quality_run`` stores (its figures are made up here;
    the end-to-end test scores real simulated engines)."""
    passed = status == QualityGateStatus.PASSED
    results = {**FAILED_RESULTS, "passed": passed, "reasons": [] if passed else ["too far"]}
    QualityGate.objects.filter(pk=gate.pk).update(
        status=status, results=results, finished_at=timezone.now()
    )
    gate.refresh_from_db()
    return gate
