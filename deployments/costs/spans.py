"""The writer of the replica timeline (``ReplicaSpan``), called by reconcile with each pass's
replicas as it saves them.

A pass opens a span for each engine replica it sees holding GPUs (any phase but pending: a
pending pod has no node yet) that has no open span, and closes each open span whose replica it no
longer sees. It compares with what is stored, not with the previous pass, so after a worker
crash the next pass closes and opens what it sees (a replica that came and went meanwhile is
missed; one that went is charged until that pass). A span starts when the cluster scheduled
the replica, where it says so, else when the pass saw it. A running canary's pool holds GPUs of
its own beside the endpoint's (``canary_pool.sync`` observes it into ``Canary.replica_facts``,
not the endpoint's facts): its replicas are charged to the canary's revision the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction
from pydantic import ValidationError

from deployments.costs.models import ReplicaSpan
from deployments.drivers.base import PENDING
from deployments.endpoints.models import Deployment
from deployments.experiments.queries import running_canary_replicas
from deployments.fleet.models import Placement
from runtime import startup
from runtime.spec import RuntimeSpec
from runtime.topology import engine_groups

Key = tuple[str, str]  # (cluster name, replica name)


def record_spans(
    deployment: Deployment, replicas: Iterable[Mapping[str, Any]] | None, now: datetime
) -> None:
    """Open and close ``deployment``'s spans to match ``replicas`` (``ReplicaFacts.as_dict()``
    each); None: the pass saw nothing (it failed before observing), nothing changes."""
    if replicas is None:
        return
    replicas = [*replicas, *running_canary_replicas(deployment)]
    home = deployment.cluster.name
    holding = {
        (str(r.get("cluster") or home), str(r["name"])): r
        for r in replicas
        if r.get("role") != "router" and r.get("phase") != PENDING
    }
    open_spans = ReplicaSpan.objects.filter(deployment_id=deployment.pk, ended_at=None)
    known = {(s.cluster_name, s.replica): s.pk for s in open_spans}
    gone = [pk for key, pk in known.items() if key not in holding]
    with transaction.atomic():
        ReplicaSpan.objects.filter(pk__in=gone).update(ended_at=now, last_seen_at=now)
        open_spans.exclude(pk__in=gone).update(last_seen_at=now)
    new = {key: facts for key, facts in holding.items() if key not in known}
    if new:
        _open(deployment, new, now)


def _open(deployment: Deployment, new: Mapping[Key, Mapping[str, Any]], now: datetime) -> None:
    shapes = _shapes(deployment, {facts.get("revision") for facts in new.values()})
    clusters = {p.cluster.name: p.cluster for p in Placement.objects.filter(deployment=deployment)}
    clusters.setdefault(deployment.cluster.name, deployment.cluster)
    for (cluster, name), facts in new.items():
        revision = facts.get("revision")
        role = str(facts.get("role") or "engine")
        gpu, gpus = shapes.get((revision, role), ("", 0))
        if not gpus:
            continue  # a revision whose settings no longer parse: nothing to price it by
        try:
            with transaction.atomic():
                ReplicaSpan.objects.create(
                    organization_id=deployment.organization_id,
                    deployment_id=deployment.pk,
                    deployment_slug=deployment.slug,
                    revision=revision,
                    replica=name,
                    role=role,
                    cluster=clusters.get(cluster),
                    cluster_name=cluster,
                    gpu=gpu,
                    gpus=gpus,
                    started_at=_started(facts, now),
                    last_seen_at=now,
                )
        except IntegrityError:  # another pass opened it first
            continue


def _started(facts: Mapping[str, Any], now: datetime) -> datetime:
    milestones = facts.get("milestones") or {}
    at = milestones.get(startup.SCHEDULED) or milestones.get(startup.CREATED)
    if not at:
        return now
    return min(now, datetime.fromtimestamp(float(at), UTC))


def _shapes(deployment: Deployment, numbers: set[Any]) -> dict[tuple[Any, str], tuple[str, int]]:
    """(revision number, role) -> (GPU id, GPUs per replica) from each revision's settings."""
    shapes: dict[tuple[Any, str], tuple[str, int]] = {}
    for revision in deployment.revisions.filter(number__in=[n for n in numbers if n]):
        try:
            spec = RuntimeSpec.model_validate(revision.spec)
        except ValidationError:
            continue
        for group in engine_groups(spec):
            shapes[(revision.number, group.role)] = (spec.hardware.gpu, group.gpus)
    return shapes
