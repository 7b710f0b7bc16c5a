"""What reconcile would have seen, written when a cluster's processes were stopped from outside
any pass (``plinth_local_stop`` when ``make run`` ends): the observed fields of the endpoints,
their canaries' pools and their placements, as a pass that found nothing running leaves them.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from controlplane import notify
from deployments.endpoints.models import Deployment
from deployments.experiments.models import Canary
from deployments.fleet.models import Placement


def record_cluster_stopped(kind: str) -> int:
    """Every process of every endpoint on clusters of ``kind`` was stopped from outside a pass
    (``plinth_local_stop`` when ``make run`` ends): nothing of theirs runs or serves now.

    Records exactly that, so status follows what runs (not active while the gateway has no
    router to send to), and makes them due so the next pass, after a restart, brings them back.
    Returns how many endpoints it touched.
    """
    now = timezone.now()
    rows = Deployment.objects.filter(cluster__kind=kind).exclude(
        ready_replicas=0, total_replicas=0, replica_facts=[], router_url=""
    )
    ids = [str(pk) for pk in rows.values_list("pk", flat=True)]
    with transaction.atomic():
        touched = Deployment.objects.filter(pk__in=ids)
        touched.update(
            ready_replicas=0, total_replicas=0, replica_facts=[], router_url="",
            rollout_started_at=None, rollout_deadline=None, observed_at=now,
            next_reconcile_at=now,
        )  # fmt: skip
        # As after a stop, the next start comes up from zero with a window of its own; an
        # endpoint whose target was abandoned keeps its serving revision (degraded until back).
        touched.filter(current_revision=F("target_revision")).update(current_revision=None)
        # Their canaries' pools were stopped too: the gateway must not send them a share.
        Canary.objects.filter(deployment__cluster__kind=kind).exclude(router_url="").update(
            router_url="", ready_replicas=0, replica_facts=[]
        )
        Placement.objects.filter(cluster__kind=kind).update(  # what the gateway routes by
            router_url="", ready_replicas=0, total_replicas=0, replica_facts=[]
        )
        for deployment_id in ids:
            notify.publish_on_commit("deployment", deployment_id)
    return len(ids)
