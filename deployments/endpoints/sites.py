"""The clusters one reconcile pass works on: a ``Site`` per placement whose cluster Plinth can
see, each with that cluster's own driver (and so its own informer cache) and the endpoint's ref
there, and what the pass saw on them, merged into the one ``Observation`` the rollout rules read.

An endpoint on one cluster has one site and its observation is that cluster's, unchanged. On
several, each replica says its cluster and each cluster event's line starts with the cluster's
name (the timeline names where it happened).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from deployments.clusters.drivers import driver_for, ref_for
from deployments.drivers.base import DeploymentRef, Driver, Observation
from deployments.endpoints.models import Deployment
from deployments.fleet import placing
from deployments.fleet.models import Placement


@dataclass
class Site:
    placement: Placement
    driver: Driver
    ref: DeploymentRef
    before: Observation = field(default_factory=Observation)
    after: Observation = field(default_factory=Observation)
    planned: int | None = None  # the replicas this pass asked of it (None: not asked)
    done: bool = True  # a stop there finished
    retired: bool = False  # taken out of the placement, and everything there deleted

    @property
    def name(self) -> str:
        return self.placement.cluster.name


def open_sites(deployment: Deployment, placements: Sequence[Placement]) -> list[Site]:
    """A site per placement on an available cluster, in the placements' order. A driver that
    cannot be made (a kubeconfig refused) raises ``PermanentDriverError``, after closing the
    ones made."""
    sites: list[Site] = []
    try:
        for placement in placements:
            if placement.cluster.available:
                driver = driver_for(placement.cluster)
                ref = ref_for(deployment, placement.cluster)
                sites.append(Site(placement, driver, ref))
    except Exception:
        close_sites(sites)
        raise
    return sites


def close_sites(sites: Sequence[Site]) -> None:
    for site in sites:
        site.driver.close()


def merged(sites: Sequence[Site], *, after: bool, named: bool) -> Observation:
    """The sites' observations as one; ``named``: each replica and event says its cluster."""
    seen = [(site.name, site.after if after else site.before) for site in sites]
    if not named:
        return seen[0][1] if seen else Observation()
    replicas, events, failures = [], [], []
    router, router_ready = "", False
    for name, observation in seen:
        replicas += [replace(r, cluster=name) for r in observation.replicas]
        events += [
            replace(e, message=f"{name}: {e.message}", key=f"{name}:{e.key}" if e.key else "")
            for e in observation.events
        ]
        failures += list(observation.failures)
        if observation.router_url and not router:
            router, router_ready = observation.router_url, observation.router_ready
    return Observation(
        replicas=tuple(replicas),
        router_url=router,
        router_ready=router_ready,
        events=tuple(events),
        failures=tuple(failures),
    )


def serving_router(
    deployment: Deployment, placements: Sequence[Placement], sites: Sequence[Site]
) -> str:
    """The one router address read where a single one is (``Deployment.router_url``): the
    first cluster's in rollout order (home first) with ready replicas, else the first with a
    router. A cluster Plinth cannot see is not offered."""
    seen = {site.placement.pk: site for site in sites}
    routers = []
    for placement in placements:
        site = seen.get(placement.pk)
        if site is not None:
            url = placing.router_url_for(placement, deployment.slug, site.after.router_url)
            routers.append((site.after.ready_count(), url))
    ready = [url for count, url in routers if count and url]
    chosen = ready or [url for _, url in routers if url]
    return chosen[0] if chosen else ""


def store_sites(
    deployment: Deployment, placements: Sequence[Placement], sites: Sequence[Site]
) -> bool:
    """What the pass asked of and saw on each cluster; a lost cluster's placement keeps what
    was last seen there and is only marked lost; a retired one that is gone is removed.
    Whether anything the gateway reads of them changed."""
    seen = {site.placement.pk: site for site in sites}
    changed = False
    for placement in placements:
        site = seen.get(placement.pk)
        if site is None:
            changed |= placing.store(placement, None, None)
            continue
        if site.retired:
            Placement.objects.filter(pk=placement.pk).delete()
            changed = True
            continue
        observation = site.after
        changed |= placing.store(
            placement,
            site.planned,
            placing.Seen(
                ready=observation.ready_count(),
                total=len([r for r in observation.engines() if r.phase != "terminating"]),
                replica_facts=[r.as_dict() for r in observation.replicas],
                router_url=placing.router_url_for(
                    placement, deployment.slug, observation.router_url
                ),
            ),
        )
    return changed
