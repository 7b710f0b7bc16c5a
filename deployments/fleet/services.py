"""The fleet's writers: which clusters an endpoint runs on (``set_placement``), and an operator's
drain of a cluster (``drain_cluster``, ``undrain_cluster``).

A placement is a scale-like change, not a revision: where replicas run changes neither what a
replica runs nor what a rollback would restore, so it commits through the change kernel like a
scale (audited, the generation bumped, reconcile sent) and leaves the revisions alone. The
first cluster named is the endpoint's home (``Deployment.cluster``): rollouts start there and a
canary's pool runs there. A cluster left out is not dropped at once: its placement retires
(its replicas start elsewhere first, then stop, then its objects are deleted).

A drain is a cluster's, set by its admins: every endpoint placed on it moves its replicas to
its other clusters, new replicas ready first (``fleet.plan.hold_shrinks``); an endpoint with
no other cluster keeps serving there (a drain never takes an endpoint down).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane import audit
from controlplane.access import Actor, NotFound, require_role
from controlplane.models import Role
from controlplane.services import Conflict, ServiceError
from deployments.clusters import queries as cluster_queries
from deployments.clusters.models import Cluster, ClusterKind
from deployments.endpoints import changes
from deployments.endpoints.models import Deployment
from deployments.endpoints.timeline import record_event
from deployments.experiments.queries import has_running_canary
from deployments.fleet import health
from deployments.fleet.models import Placement, PlacementPolicy
from deployments.quotas import services as quotas
from runtime.spec import RuntimeSpec

MAX_CLUSTERS = 16  # clusters one endpoint may name
MAX_WEIGHT = 1000


@transaction.atomic
def set_placement(
    actor: Actor,
    deployment_id: uuid.UUID | str,
    *,
    policy: str,
    clusters: Sequence[Mapping[str, Any]],
) -> Deployment:
    """Place the endpoint on ``clusters`` (each ``{"cluster": id or name, "min_replicas",
    "weight"}``, the first its home) with ``policy``. Bad input is a ServiceError naming the
    field (``policy``, ``clusters[1].min_replicas``)."""
    require_role(actor, Role.DEVELOPER)
    deployment = changes.locked(actor, deployment_id)
    changes.ensure_not_deleting(deployment)
    assert deployment.target_revision is not None
    spec = RuntimeSpec.model_validate(deployment.target_revision.spec)
    policy = _clean_policy(policy)
    wanted = _clean_clusters(actor, clusters, policy)
    floor = sum(entry["min_replicas"] for entry in wanted)
    if floor > spec.autoscaling.max_replicas:
        raise ServiceError(
            f"the clusters' minimums add up to {floor}, over autoscaling.max_replicas "
            f"({spec.autoscaling.max_replicas}); lower them or raise the maximum",
            field="clusters",
        )
    replicas = max(deployment.desired_replicas, floor) if deployment.desired_replicas else 0
    for index, entry in enumerate(wanted):
        _check_cluster_takes(entry["cluster"], spec, replicas, index)
    quotas.check(
        actor.organization,
        deployment=deployment,
        spec=deployment.target_revision.spec,
        replicas=replicas,
        desired_state=deployment.desired_state,
    )
    home = wanted[0]["cluster"]
    if home.pk != deployment.cluster_id and has_running_canary(deployment):
        raise Conflict(
            "a canary runs on the endpoint's home cluster; finish it before naming another "
            "cluster first",
            field="clusters",
        )
    before = {**deployment.desired_snapshot(), "placement": placement_snapshot(deployment)}
    _store(deployment, wanted)
    deployment.placement_policy = policy
    deployment.cluster = home
    after = placement_snapshot(deployment)
    if after == before["placement"]:
        return deployment
    names = ", ".join(_described(entry) for entry in wanted)
    message = f"placed by {actor.label}: {policy} over {names}"
    record_event(deployment, "info", "Placed", message, data={"placement": after})
    changes.commit_change(actor, deployment, "deployment.place", before, extra={"placement": after})
    return deployment


def _clean_policy(policy: object) -> str:
    if policy not in PlacementPolicy.values:
        choices = ", ".join(PlacementPolicy.values)
        raise ServiceError(f"use one of: {choices}", field="policy", code="invalid")
    return str(policy)


def _clean_clusters(
    actor: Actor, clusters: Sequence[Mapping[str, Any]], policy: str
) -> list[dict[str, Any]]:
    if not clusters:
        raise ServiceError("name at least one cluster", field="clusters", code="required")
    if len(clusters) > MAX_CLUSTERS:
        raise ServiceError(f"at most {MAX_CLUSTERS} clusters", field="clusters")
    wanted: list[dict[str, Any]] = []
    for index, entry in enumerate(clusters):
        where = f"clusters[{index}]"
        try:
            cluster = cluster_queries.get_cluster(actor, str(entry.get("cluster", "")))
        except NotFound:
            raise ServiceError(
                "no such cluster", field=f"{where}.cluster", code="not_found"
            ) from None
        if any(w["cluster"].pk == cluster.pk for w in wanted):
            raise ServiceError("named twice", field=f"{where}.cluster", code="duplicate")
        wanted.append(
            {
                "cluster": cluster,
                "min_replicas": _count(entry, "min_replicas", 0, where, 0, 1000),
                "weight": _count(entry, "weight", 1, where, 0, MAX_WEIGHT),
            }
        )
    if policy == PlacementPolicy.WEIGHTED and not any(w["weight"] for w in wanted):
        raise ServiceError("give at least one cluster a weight above 0", field="clusters")
    return wanted


def _count(
    entry: Mapping[str, Any], name: str, default: int, where: str, low: int, high: int
) -> int:
    value = entry.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ServiceError(
            f"a whole number from {low} to {high}", field=f"{where}.{name}", code="invalid"
        )
    return value


def _check_cluster_takes(cluster: Cluster, spec: RuntimeSpec, replicas: int, index: int) -> None:
    """What the cluster's operator settings keep (a GPU it has no map for): refused, named by
    the cluster's place in the list."""
    try:
        changes.cluster_warnings(cluster, spec, replicas)
    except ServiceError as exc:
        raise ServiceError(
            f"cluster {cluster.name}: {exc.message}", field=f"clusters[{index}].cluster"
        ) from None


def _store(deployment: Deployment, wanted: Sequence[Mapping[str, Any]]) -> None:
    existing = {p.cluster_id: p for p in deployment.placements.all()}
    for entry in wanted:
        cluster = entry["cluster"]
        fields = {"min_replicas": entry["min_replicas"], "weight": entry["weight"]}
        if cluster.pk in existing:
            Placement.objects.filter(pk=existing.pop(cluster.pk).pk).update(
                **fields, retiring=False
            )
        else:
            Placement.objects.create(deployment=deployment, cluster=cluster, **fields)
    # Left out: retired by reconcile once its replicas run elsewhere (never dropped here).
    Placement.objects.filter(pk__in=[p.pk for p in existing.values()]).update(retiring=True)


def _described(entry: Mapping[str, Any]) -> str:
    extra = [f"min {entry['min_replicas']}"] if entry["min_replicas"] else []
    if entry["weight"] != 1:
        extra.append(f"weight {entry['weight']}")
    name: str = entry["cluster"].name
    return name + (f" ({', '.join(extra)})" if extra else "")


def placement_snapshot(deployment: Deployment) -> dict[str, Any]:
    """The placement as asked (the audit log's before and after)."""
    rows = deployment.placements.filter(retiring=False).select_related("cluster")
    home = deployment.cluster_id
    ordered = sorted(rows, key=lambda p: (p.cluster_id != home, p.cluster.name))
    return {
        "policy": deployment.placement_policy,
        "clusters": [
            {"cluster": p.cluster.name, "min_replicas": p.min_replicas, "weight": p.weight}
            for p in ordered
        ],
    }


# --- drain -----------------------------------------------------------------------------------


@transaction.atomic
def drain_cluster(actor: Actor, cluster_id: uuid.UUID | str) -> Cluster:
    """Move every endpoint off the cluster (admins): replicas start on their other clusters,
    then stop here. Draining a drained cluster changes nothing."""
    cluster = _drainable(actor, cluster_id)
    if cluster.draining_since is None:
        _set_draining(actor, cluster, timezone.now())
    return cluster


@transaction.atomic
def undrain_cluster(actor: Actor, cluster_id: uuid.UUID | str) -> Cluster:
    """The cluster takes replicas again; endpoints are planned onto it by their policies."""
    cluster = _drainable(actor, cluster_id)
    if cluster.draining_since is not None:
        _set_draining(actor, cluster, None)
    return cluster


def _drainable(actor: Actor, cluster_id: uuid.UUID | str) -> Cluster:
    require_role(actor, Role.ADMIN)
    cluster = cluster_queries.get_cluster(actor, cluster_id)
    if cluster.kind != ClusterKind.KUBERNETES:
        raise Conflict("only a Kubernetes cluster can be drained", code="built_in")
    return Cluster.objects.select_for_update().get(pk=cluster.pk)


def _set_draining(actor: Actor, cluster: Cluster, since: Any) -> None:
    before = {"draining": cluster.draining_since is not None}
    cluster.draining_since = since
    cluster.save(update_fields=["draining_since"])
    action = "cluster.drain" if since else "cluster.undrain"
    audit.record(actor, action, cluster, before=before, after={"draining": since is not None})
    ids = [str(i) for i in cluster.placements.values_list("deployment_id", flat=True)]
    transaction.on_commit(lambda: health.make_endpoints_due(cluster))
    for deployment_id in ids:
        changes.queue_reconcile(uuid.UUID(deployment_id))
