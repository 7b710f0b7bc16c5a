"""The fleet page: every cluster's health, GPUs by type and the endpoints on it, live.

htmx reloads the clusters' cards every ``REFRESH_SECONDS`` for as long as the page is open: a
cluster's health can change at any time, so the poll never stops by itself."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from controlplane.guard import HtmxHttpRequest, actor_of, console_view
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
