"""The endpoint page's adapters card: its LoRA adapters with their traffic, and the forms that
add or remove one (htmx swaps the card; without a script the forms post and redirect). Each
change is one ``deployments.endpoints.adapters`` call: a new revision, applied live where
SGLang allows it."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from controlplane.access import NotFound
from controlplane.guard import HtmxHttpRequest, actor_of, console_view
from controlplane.services import ServiceError
from deployments.endpoints import adapters, queries
from deployments.endpoints.models import Deployment


def card_context(endpoint: Deployment, **extra: Any) -> dict[str, Any]:
    return {"endpoint": endpoint, "lora": queries.adapters_of(endpoint), **extra}


def _answer(request: HtmxHttpRequest, slug: str, **extra: Any) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    if not request.htmx:
        if extra.get("error"):
            messages.error(request, extra["error"])
        return redirect("endpoint-detail", slug=endpoint.slug)
    context = card_context(endpoint, **extra)
    status = 422 if extra.get("error") else 200
    return render(request, "deployments/_adapters.html", context, status=status)


@require_POST
@console_view
def adapter_add(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    form = {name: request.POST.get(name, "").strip() for name in ("name", "source", "rank")}
    try:
        endpoint = queries.get_endpoint(actor_of(request), slug)
        adapter: dict[str, Any] = {"name": form["name"], "source": form["source"]}
        adapter["rank"] = _rank(form["rank"])
        adapters.add_adapter(actor_of(request), endpoint.pk, adapter)
    except ServiceError as exc:
        return _answer(request, slug, error=exc.message, form=form)
    return _answer(request, slug)


@require_POST
@console_view
def adapter_remove(request: HtmxHttpRequest, slug: str, name: str) -> HttpResponse:
    try:
        endpoint = queries.get_endpoint(actor_of(request), slug)
        adapters.remove_adapter(actor_of(request), endpoint.pk, name)
    except (ServiceError, NotFound) as exc:
        return _answer(request, slug, error=getattr(exc, "message", str(exc)))
    return _answer(request, slug)


def _rank(raw: str) -> int:
    if not raw.isdigit():
        raise ServiceError("rank: enter a whole number (the adapter's r)", field="rank")
    return int(raw)
