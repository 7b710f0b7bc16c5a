"""Console pages and actions of the fleet: the fleet page (every cluster's health, GPUs by type
and the endpoints on it, live), a developer's placement of an endpoint on clusters (the endpoint
page's placement form), and an admin's drain of a cluster, or the end of it, from the clusters
page (the same writers as the API's ``PUT .../placement`` and ``POST .../drain``).

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
def endpoint_placement(request: HttpRequest, slug: str) -> HttpResponse:
    """The form: ``policy``, a ``cluster`` box per cluster (its id), the ``home`` one, and
    ``min-<id>`` and ``weight-<id>`` per cluster."""
    form = request.POST
    chosen = form.getlist("cluster")
    home = form.get("home", "")
    if home and home not in chosen:
        chosen.insert(0, home)  # the home is always one of them
    ordered = sorted(chosen, key=lambda c: c != home)  # the home first
    try:
        clusters = [
            {
                "cluster": cluster_id,
                "min_replicas": _whole(form.get(f"min-{cluster_id}"), "min_replicas", 0),
                "weight": _whole(form.get(f"weight-{cluster_id}"), "weight", 1),
            }
            for cluster_id in ordered
        ]
        services.set_placement(
            actor_of(request), slug, policy=form.get("policy", ""), clusters=clusters
        )
    except ServiceError as exc:
        messages.error(request, f"Placement not saved: {exc.field or 'placement'}: {exc.detail}")
    else:
        messages.success(request, "Placement saved: replicas move with new ones ready first.")
    return redirect("endpoint-detail", slug=slug)


def _whole(raw: str | None, field: str, default: int) -> int:
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ServiceError("enter a whole number", field=field) from None


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
