"""Whether each Kubernetes cluster can be seen: the writer of ``Cluster.available`` and the
facts beside it, and so what starts a failover.

Beat runs ``check_clusters`` every ``PLINTH_CLUSTER_CHECK_INTERVAL_S``: one LIST of the
cluster's nodes, asked of the API server itself. A check fails when the API server does not
answer (or refuses the worker's credentials), or when it answers but every GPU node it has is
NotReady. ``judge`` (pure) turns the checks into availability with two clocks:

- a cluster failing for ``PLINTH_CLUSTER_LOST_AFTER_S`` (the grace period) becomes unavailable:
  its endpoints are made due, and their reconcile passes re-plan its replicas onto their other
  clusters (``deployments.fleet.placing``), asking nothing of it (nothing there is deleted);
- an unavailable cluster becomes available again only after answering for
  ``PLINTH_CLUSTER_RETURN_AFTER_S`` without a failure (hysteresis): one good answer between
  failures moves nothing back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from deployments.clusters.drivers import driver_for
from deployments.clusters.models import Cluster, ClusterKind
from deployments.drivers.errors import DriverError
from deployments.drivers.kube.driver import KubeDriver
from deployments.endpoints import due

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Availability:
    """A cluster's availability facts, as ``Cluster`` keeps them."""

    available: bool = True
    last_seen_at: datetime | None = None
    failing_since: datetime | None = None
    unavailable_since: datetime | None = None
    healthy_since: datetime | None = None
    unavailable_reason: str = ""


def judge(
    was: Availability, failure: str, now: datetime, lost_after_s: float, return_after_s: float
) -> Availability:
    """The availability after one check (``failure``: why it failed, "" when it answered)."""
    if failure:
        failing_since = was.failing_since or now
        after = replace(was, failing_since=failing_since, healthy_since=None)
        if was.available and now - failing_since >= timedelta(seconds=lost_after_s):
            return replace(
                after, available=False, unavailable_since=now, unavailable_reason=failure
            )
        return after
    after = replace(was, last_seen_at=now, failing_since=None)
    if was.available:
        return after
    healthy_since = was.healthy_since or now
    if now - healthy_since >= timedelta(seconds=return_after_s):
        return replace(
            after,
            available=True,
            unavailable_since=None,
            healthy_since=None,
            unavailable_reason="",
        )
    return replace(after, healthy_since=healthy_since)


def check_clusters() -> int:
    """Check every Kubernetes cluster once; how many changed availability."""
    clusters = Cluster.objects.filter(kind=ClusterKind.KUBERNETES).select_related("kubeconfig")
    return sum(check_cluster(cluster) for cluster in clusters)


def check_cluster(cluster: Cluster, now: datetime | None = None) -> bool:
    """One check of ``cluster``, stored; True when it became unavailable or available."""
    now = now or timezone.now()
    was = _availability(cluster)
    after = judge(
        was,
        failure_of(cluster),
        now,
        settings.PLINTH_CLUSTER_LOST_AFTER_S,
        settings.PLINTH_CLUSTER_RETURN_AFTER_S,
    )
    Cluster.objects.filter(pk=cluster.pk).update(**vars(after))
    if after.available == was.available:
        return False
    state = "available again" if after.available else f"unavailable ({after.unavailable_reason})"
    log.warning("cluster %s is %s", cluster.name, state)
    make_endpoints_due(cluster)
    return True


def make_endpoints_due(cluster: Cluster) -> int:
    """Every endpoint placed on ``cluster`` is reconciled now (a failover, a return, a drain)."""
    ids = cluster.placements.values_list("deployment_id", flat=True)
    return due.make_due(str(i) for i in ids)


def failure_of(cluster: Cluster) -> str:
    """Why ``cluster`` cannot be seen now; "" when its API server answers with a Ready GPU node
    (or with no GPU node at all: nothing is lost that it never had)."""
    try:
        driver = driver_for(cluster)
    except DriverError as exc:
        return exc.message
    try:
        if not isinstance(driver, KubeDriver):
            return ""
        nodes, ready = driver.gpu_node_readiness()
    except DriverError as exc:
        return unanswered(exc)
    finally:
        driver.close()
    if nodes and not ready:
        return f"all {nodes} GPU nodes are NotReady"
    return ""


def unanswered(exc: DriverError) -> str:
    """Why a check that raised ``exc`` failed; "" for a 429: a server that rate-limits the
    check is answering (busy, not lost), and moving replicas off it would add to its load."""
    if exc.status == 429:
        return ""
    return f"the API server does not answer: {exc.message}"


def _availability(cluster: Cluster) -> Availability:
    return Availability(
        available=cluster.available,
        last_seen_at=cluster.last_seen_at,
        failing_since=cluster.failing_since,
        unavailable_since=cluster.unavailable_since,
        healthy_since=cluster.healthy_since,
        unavailable_reason=cluster.unavailable_reason,
    )
