"""What the quality gate tests share: a gate left as its run would leave it (no engines)."""

from __future__ import annotations

from django.utils import timezone

from deployments.experiments.models import QualityGate, QualityGateStatus
from deployments.experiments.quality.run import results_of
from runtime.quality import GateThresholds, PromptScore, QualityReport

FAILED_MEAN_KL = 0.0912  # nats per token: over the default threshold of 0.05


def report_of(gate: QualityGate, passed: bool) -> QualityReport:
    """Every prompt of ``gate`` scored over two tokens: both sides alike, or (not ``passed``)
    a mean KL of ``FAILED_MEAN_KL`` with the top-1 token agreeing on one position of two."""
    kl = 0.001 if passed else FAILED_MEAN_KL
    scores = tuple(
        PromptScore(index=i, prompt=prompt, kls=(kl, kl), agreements=2 if passed else 1)
        for i, prompt in enumerate(gate.prompt_texts())
    )
    return QualityReport(scores, GateThresholds(gate.max_mean_kl, gate.min_top1_agreement))


def finish(gate: QualityGate, status: str = QualityGateStatus.FAILED) -> QualityGate:
    """``gate`` judged: what ``deployments.experiments.quality.run`` stores, from a report over the
    gate's own prompts (its figures are made up here; the end-to-end test scores real simulated
    engines)."""
    report = report_of(gate, passed=status == QualityGateStatus.PASSED)
    assert report.verdict().passed == (status == QualityGateStatus.PASSED), report.verdict()
    QualityGate.objects.filter(pk=gate.pk).update(
        status=status, results=results_of(report), finished_at=timezone.now()
    )
    gate.refresh_from_db()
    return gate
