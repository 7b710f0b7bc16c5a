"""The clusters one reconcile pass works on: a ``Site`` per placement whose cluster Plinth can
see, each with that cluster's own driver (and so its own informer cache) and the endpoint's ref
there, and what the pass saw on them, merged into the one ``Observation`` the rollout rules read.

An endpoint on one cluster has one site and its observation is that cluster's, unchanged. On
several, each replica says its cluster and each cluster event's line starts with the cluster's
name (the timeline names where it happened).

A cluster that fails a call with a temporary error while another of the endpoint's clusters
answers is set aside for the rest of the pass (``on_each``): it is asked nothing more, what was
last seen there stands for it, and the others are applied and observed as usual. Until the
cluster's grace period makes it lost (``deployments.fleet.health``), one cluster's outage so
never holds back the others' scale-ups and rollouts. When none answers, the error is the pass's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime

from deployments.clusters.drivers import driver_for, ref_for
from deployments.drivers.base import DeploymentRef, Driver, Observation, ReplicaFacts
from deployments.drivers.errors import TemporaryDriverError
from deployments.endpoints.models import Deployment
from deployments.fleet import placing
from deployments.fleet.models import Placement, PlacementState


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
    # Why its cluster did not answer this pass ("" while it does): set aside, asked nothing more.
    unanswered: str = ""

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
                seen = last_seen(placement)
                sites.append(Site(placement, driver, ref, before=seen, after=seen))
    except Exception:
        close_sites(sites)
        raise
    return sites


def last_seen(placement: Placement) -> Observation:
    """What the last pass that reached the placement's cluster saw there: what stands for it
    in a pass where it does not answer."""
    known = {f.name for f in fields(ReplicaFacts)}
    replicas = [
        ReplicaFacts(**{k: v for k, v in fact.items() if k in known})
        for fact in placement.replica_facts or []
    ]
    return Observation(replicas=tuple(replicas), router_url=placement.router_url)


def answering(sites: Sequence[Site]) -> list[Site]:
    return [site for site in sites if not site.unanswered]


def on_each(sites: Sequence[Site], act: Callable[[Site], object]) -> None:
    """``act`` on each site that answers, in order. A site whose call fails with a temporary
    error is set aside while another site answers; the last one left raises it."""
    for site in answering(sites):
        try:
            act(site)
        except TemporaryDriverError as exc:
            if not any(other is not site for other in answering(sites)):
                raise
            site.unanswered = exc.message


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
    deployment: Deployment,
    placements: Sequence[Placement],
    sites: Sequence[Site],
    now: datetime,
) -> bool:
    """What the pass asked of and saw on each cluster; a lost cluster's placement keeps what
    was last seen there and is only marked lost, an unanswering one keeps it too and is marked
    unanswered since ``now`` (unless it was already); a retired one that is gone is removed.
    Whether anything the gateway reads of them changed."""
    seen = {site.placement.pk: site for site in sites}
    changed = False
    for placement in placements:
        site = seen.get(placement.pk)
        if site is None:
            changed |= placing.store(placement, None, None)
            continue
        if site.unanswered:
            changed |= placing.store(placement, None, None)
            placing.mark_unanswered(placement, placement.unanswered_since or now)
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
        placing.mark_unanswered(placement, None)
    return changed


def unanswered_lines(sites: Sequence[Site]) -> list[tuple[str, str, str, dict[str, str]]]:
    """(level, reason, message, data) of the timeline's lines for clusters that stopped
    answering this pass, or answer again after not answering (one that was lost meanwhile
    returns by ``moves``' line)."""
    lines = []
    for site in sites:
        was = site.placement.unanswered_since
        if site.unanswered and was is None:
            message = (
                f"cluster {site.name} does not answer ({site.unanswered}): what was last seen "
                "there is kept and it is asked again on the next pass; the other clusters "
                "go on without it"
            )
            lines.append(("warning", "ClusterUnanswered", message, {"cluster": site.name}))
        elif not site.unanswered and was is not None and not _was_lost(site):
            since = was.strftime("%H:%M:%S")
            message = f"cluster {site.name} answers again (it did not since {since})"
            lines.append(("info", "ClusterAnswers", message, {"cluster": site.name}))
    return lines


def _was_lost(site: Site) -> bool:
    return site.placement.state == PlacementState.LOST
