"""Console actions of the fleet: an admin drains a cluster, or ends its drain, from the
clusters page (the same writers as ``POST /api/v1/clusters/{id}/drain``)."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from controlplane.guard import actor_of, console_view
from controlplane.services import ServiceError
from deployments.fleet import services


@require_POST
@console_view
def cluster_drain(request: HttpRequest, cluster_id: str) -> HttpResponse:
    try:
        cluster = services.drain_cluster(actor_of(request), cluster_id)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(
            request,
            f"Draining {cluster.name}: endpoints start replicas on their other clusters, then "
            "stop them here.",
        )
    return redirect("cluster-list")


@require_POST
@console_view
def cluster_undrain(request: HttpRequest, cluster_id: str) -> HttpResponse:
    try:
        cluster = services.undrain_cluster(actor_of(request), cluster_id)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{cluster.name} takes replicas again.")
    return redirect("cluster-list")
