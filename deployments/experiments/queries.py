"""Reads of an endpoint's experiments: its canaries, benchmarks and quality gates. Reads only:
the writers are each experiment's ``services``."""

from __future__ import annotations

from deployments.endpoints.models import Deployment
from deployments.experiments.models import Canary, CanaryStatus


def running_canary(deployment: Deployment) -> Canary | None:
    """The endpoint's running canary (at most one runs), with its revisions."""
    return (
        Canary.objects.select_related("revision", "baseline_revision")
        .filter(deployment=deployment, status=CanaryStatus.RUNNING)
        .first()
    )
