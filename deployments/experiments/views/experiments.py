"""The endpoint's Experiments tab: the loop in one place.

Benchmarks, canaries and quality gates of the endpoint, newest first, each with its verdict;
a form to run a gate on the running canary's revision (developers), and the override of a failed
gate with a reason (admins). Every write is one ``quality_services`` call, then back here with a
message. The optimizer's "Apply as a canary" (``views.optimize``) lands here too.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from controlplane.guard import actor_of, console_view
from controlplane.services import ServiceError
from deployments.endpoints import queries
from deployments.experiments import context as experiments_context
from deployments.experiments.quality import services as quality_services
from runtime.quality import DEFAULT_MAX_MEAN_KL, DEFAULT_MIN_TOP1_AGREEMENT


@require_GET
@console_view
def experiments(request: HttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    return render(
        request, "deployments/experiments.html", experiments_context.experiments_context(endpoint)
    )


def _back(slug: str) -> HttpResponse:
    return redirect(reverse("endpoint-experiments", args=[slug]))


@require_POST
@console_view
def gate_start(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    try:
        limits = {
            name: float(request.POST.get(name) or default)
            for name, default in (
                ("max_mean_kl", DEFAULT_MAX_MEAN_KL),
                ("min_top1_agreement", DEFAULT_MIN_TOP1_AGREEMENT),
            )
        }
    except ValueError:
        messages.error(request, "Gate not started: the thresholds must be numbers.")
        return _back(slug)
    try:
        quality_services.start_gate(
            actor, endpoint.pk, number, max_mean_kl=limits["max_mean_kl"],
            min_top1_agreement=limits["min_top1_agreement"],
            prompts_jsonl=request.POST.get("prompts_jsonl", ""),
        )  # fmt: skip
    except ServiceError as exc:
        messages.error(request, f"Gate not started: {exc}")
    else:
        messages.success(request, f"Quality gate of revision {number} queued.")
    return _back(slug)


@require_POST
@console_view
def gate_override(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    try:
        quality_services.override_gate(
            actor, endpoint.pk, number, reason=request.POST.get("reason", "")
        )
    except ServiceError as exc:
        messages.error(request, f"Not overridden: {exc}")
    else:
        messages.success(request, f"Revision {number}'s quality gate overridden.")
    return _back(slug)
