"""Reads of an endpoint's experiments: its canaries, benchmarks and quality gates. Reads only:
the writers are each experiment's ``services``.

"The running canary" is asked here and nowhere else (the gateway's loader keeps its own
one-query read of every endpoint's). At most one canary runs per endpoint (the constraint
``one_running_canary_per_deployment``); the by-revision reads narrow it to a revision number.
"""

from __future__ import annotations

from django.db.models import QuerySet

from deployments.endpoints.models import Deployment
from deployments.experiments.models import (
    Benchmark,
    Canary,
    CanaryStatus,
    QualityGate,
)


def canaries_of(deployment: Deployment) -> QuerySet[Canary]:
    """The endpoint's canaries with their revisions, newest first."""
    return (
        Canary.objects.select_related("revision", "baseline_revision")
        .filter(deployment=deployment)
        .order_by("-started_at")
    )


def running_canaries(deployment: Deployment, *, number: int | None = None) -> QuerySet[Canary]:
    """The endpoint's running canary as a query (for a writer to update), narrowed to revision
    ``number`` when given."""
    rows = Canary.objects.filter(deployment=deployment, status=CanaryStatus.RUNNING)
    return rows if number is None else rows.filter(revision__number=number)


def running_canary(deployment: Deployment, *, number: int | None = None) -> Canary | None:
    """The endpoint's running canary with its revisions (of revision ``number``, when given)."""
    return (
        running_canaries(deployment, number=number)
        .select_related("revision", "baseline_revision")
        .first()
    )


def has_running_canary(deployment: Deployment) -> bool:
    return running_canaries(deployment).exists()


def running_canary_numbers(deployment: Deployment) -> list[int]:
    """The revision numbers of the endpoint's running canaries (none or one)."""
    return list(running_canaries(deployment).values_list("revision__number", flat=True))


def running_canary_replicas(deployment: Deployment) -> list[dict[str, object]]:
    """The running canary's replica facts (none when no canary runs)."""
    facts = running_canaries(deployment).values_list("replica_facts", flat=True).first()
    return list(facts or [])


def latest_canary(deployment: Deployment) -> Canary | None:
    """The running canary, else the last one that ran."""
    return running_canary(deployment) or canaries_of(deployment).first()


def benchmarks_of(deployment: Deployment) -> QuerySet[Benchmark]:
    """The endpoint's benchmarks with their revisions, newest first."""
    return deployment.benchmarks.select_related("revision").order_by("-created_at")


def gates_of(deployment: Deployment) -> QuerySet[QualityGate]:
    """The endpoint's quality gate runs with their revisions, newest first."""
    return deployment.gates.select_related("revision", "baseline_revision").order_by(
        "-created_at", "id"
    )


def reloaded_canary(canary: Canary) -> Canary:
    """The canary as stored now (a writer may have moved it on), with its revisions."""
    return Canary.objects.select_related("revision", "baseline_revision").get(pk=canary.pk)
