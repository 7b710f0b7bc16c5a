"""A canary's own pool on the cluster: engines and a router of its revision beside the endpoint's.

Reconcile calls this after the endpoint's own pass. The pool is named to the driver as an
endpoint of its own (``canary_ref``: the endpoint's id and slug with ``-r<revision>``), so each
driver runs it exactly as it runs any revision: the local driver as processes in a directory of
their own with their own smg, the kube driver as its own Deployments, router pool and Service
(labelled with the endpoint's id plus the revision, so neither pool's apply or prune touches the
other's objects). Both pools demand the endpoint's engine key, so the gateway calls either.

While a canary runs its pool is applied and observed (router address and ready replicas go on
the Canary row, which the gateway's route table reads; so does why the pool will never be ready,
for the watcher to abort on); a stopped endpoint stops it too. Once
the canary is promoted or aborted its pool is deleted, and the row marked so.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from deployments.clusters.drivers import ref_for
from deployments.drivers.base import DeploymentRef, Driver, RevisionPlan
from deployments.endpoints.models import Deployment, Revision
from deployments.endpoints.timeline import record_event
from deployments.experiments.models import Canary, CanaryStatus

log = logging.getLogger(__name__)

PlanOf = Callable[[Deployment, Revision], RevisionPlan]


def canary_ref(deployment: Deployment, canary: Canary) -> DeploymentRef:
    """The pool's name to the driver: the endpoint's, suffixed with the canary's revision."""
    own = ref_for(deployment)
    suffix = f"-r{canary.revision.number}"
    return dataclasses.replace(own, id=own.id + suffix, slug=own.slug + suffix)


def _pending(deployment: Deployment) -> list[Canary]:
    """Canaries whose pool may still be on the cluster."""
    return list(
        Canary.objects.select_related("revision")
        .filter(deployment=deployment, pool_removed=False)
        .order_by("started_at")
    )


def sync(deployment: Deployment, driver: Driver, plan_of: PlanOf, *, serving: bool) -> bool:
    """Apply the running canary's pool (``serving``: the endpoint runs; else stop it) and
    remove ended canaries' pools. True when what the gateway routes by changed."""
    changed = False
    for canary in _pending(deployment):
        ref = canary_ref(deployment, canary)
        if canary.status != CanaryStatus.RUNNING:
            if driver.delete(ref):
                Canary.objects.filter(pk=canary.pk).update(
                    pool_removed=True, router_url="", ready_replicas=0, replica_facts=[]
                )
            continue
        if serving:
            plan = plan_of(deployment, canary.revision)
            plan = dataclasses.replace(plan, replicas=canary.replicas)
            driver.apply(ref, plan)
            changed |= _observe(deployment, driver, ref, canary)
        else:
            driver.stop(ref)
            changed |= _store(canary, "", 0, [])
    return changed


def _observe(deployment: Deployment, driver: Driver, ref: DeploymentRef, canary: Canary) -> bool:
    seen = driver.observe(ref)
    ready = seen.ready_count(canary.revision.number)
    if ready and not canary.ready_replicas:
        record_event(
            deployment, "info", "CanaryReady",
            f"revision {canary.revision.number} canary: {ready}/{canary.replicas} replica(s) "
            f"ready; the gateway sends it {canary.weight}% of requests",
            canary.revision.number,
        )  # fmt: skip
    failure = seen.failure(canary.revision.number)
    why = f"{failure.reason}: {failure.message}" if failure is not None else ""
    facts = [r.as_dict() for r in seen.replicas]
    return _store(canary, seen.router_url, ready, facts, failure=why)


def _store(
    canary: Canary,
    router_url: str,
    ready: int,
    facts: list[dict[str, object]],
    *,
    failure: str = "",
) -> bool:
    """Save the pool's observed facts (only while the canary still runs); True when the
    gateway's view (router address, whether any replica is ready) changed."""
    routed_before = (canary.router_url, canary.ready_replicas > 0)
    Canary.objects.filter(pk=canary.pk, status=CanaryStatus.RUNNING).update(
        router_url=router_url, ready_replicas=ready, replica_facts=facts, pool_failure=failure
    )
    return routed_before != (router_url, ready > 0)


def tear_down(deployment: Deployment, driver: Driver) -> bool:
    """Delete every canary pool of an endpoint being deleted; True once none is left."""
    done = True
    for canary in _pending(deployment):
        if driver.delete(canary_ref(deployment, canary)):
            Canary.objects.filter(pk=canary.pk).update(pool_removed=True)
        else:
            done = False
    return done
