"""Console actions of an endpoint's canary: start (settings as JSON, a weight, sticky), promote,
abort. The Canary card on the endpoint page shows it
(``deployments.experiments.context.canary_context``); each action is one
``canary_services`` call and returns to that page with a message."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from controlplane.guard import actor_of, console_view
from controlplane.services import ServiceError
from deployments.endpoints import queries
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services


def _done(request: HttpRequest, endpoint: Deployment) -> HttpResponse:
    return redirect(reverse("endpoint-detail", args=[endpoint.slug]) + "#canary")


@require_POST
@console_view
def canary_start(request: HttpRequest, slug: str) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    try:
        spec = json.loads(request.POST.get("spec", ""))
        weight = int(request.POST.get("weight", ""))
    except ValueError:
        messages.error(request, "The canary needs its settings as JSON and a whole-number weight.")
        return _done(request, endpoint)
    try:
        canary = canary_services.start_canary(
            actor, endpoint.pk, spec=spec, weight=weight,
            sticky=request.POST.get("sticky") == "on",
            message=request.POST.get("message", "").strip(),
        )  # fmt: skip
    except ServiceError as exc:  # invalid settings name their first field in the message
        messages.error(request, exc.message)
    else:
        messages.success(
            request, f"Canary revision {canary.revision.number} starting at {canary.weight}%."
        )
    return _done(request, endpoint)


@require_POST
@console_view
def canary_promote(request: HttpRequest, slug: str) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    try:
        canary = canary_services.promote_canary(actor, endpoint.pk)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Promoting revision {canary.revision.number}.")
    return _done(request, endpoint)


@require_POST
@console_view
def canary_abort(request: HttpRequest, slug: str) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    try:
        canary = canary_services.abort_canary(
            actor, endpoint.pk, reason=request.POST.get("reason", "").strip()
        )
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Canary revision {canary.revision.number} aborted.")
    return _done(request, endpoint)
