"""Console pages of the fleet: the fleet page (every cluster's health, GPUs by type and the
endpoints on it, live), and an admin's drain of a cluster, or the end of it, from the clusters
page (the same writers as ``POST /api/v1/clusters/{id}/drain``).

htmx reloads the fleet page's cards every ``REFRESH_SECONDS`` for as long as the page is open: a
cluster's health can change at any time, so the poll never stops by itself."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from controlplane.guard import HtmxHttpRequest, actor_of, console_view
from controlplane.services import ServiceError
from deployments.fleet import services
from deployments.fleet.overview import fleet_overview

REFRESH_SECONDS = 10


@require_GET
@never_cache  # live health: a back-button copy would show it stale
@console_view
def fleet_page(request: HtmxHttpRequest) -> HttpResponse:
    context = {"cards": fleet_overview(actor_of(request)), "refresh_seconds": REFRESH_SECONDS}
    if request.htmx:
        return render(request, "deployments/fleet.html#cards", context)
    return render(request, "deployments/fleet.html", context)


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
