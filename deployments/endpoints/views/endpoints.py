"""Console pages of endpoints: the live list, the endpoint page and its status card, and the
lifecycle actions (scale, stop, start, delete), each one ``deployments.endpoints.services`` call.

Polling follows netbox's pattern: the poll attributes are rendered only while something is
unsettled, and a poll that finds everything settled answers HTTP 286, which stops htmx. That is
safe because ``settled`` is derived from facts (``deployments.status.is_settled``) and false
from the moment a change commits. The live pages are never cached, so going back to one
fetches it again rather than showing a copy frozen at an older status.
"""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HTMX_STOP_POLLING

from controlplane.access import NotFound
from controlplane.guard import HtmxHttpRequest, actor_of, console_view
from controlplane.services import ServiceError
from deployments.autoscaling.queries import ModelAccuracy, model_accuracy
from deployments.endpoints import queries, services
from deployments.endpoints.models import Deployment
from deployments.experiments.context import canary_context
from deployments.experiments.queries import running_canary
from deployments.fleet import queries as fleet_queries
from deployments.fleet.models import PlacementPolicy
from deployments.starts.queries import recent_starts, start_bars
from deployments.status import ALL_STATUSES, rolling_out
from runtime.startup import PHASE_LABELS


def _list_context(request: HttpRequest) -> dict[str, object]:
    search = request.GET.get("q", "").strip()[:100]
    status = request.GET.get("status", "")
    status = status if status in ALL_STATUSES else ""
    listed = queries.endpoint_rows(
        actor_of(request), search=search, status=status, page=request.GET.get("page")
    )
    return {
        "rows": listed.rows,
        "page": listed.page,
        "search": search,
        "status_filter": status,
        "statuses": ALL_STATUSES,
        "polling": any(not r.settled for r in listed.rows),
    }


@require_GET
@never_cache  # live status: a back-button copy would show it stale
@console_view
def endpoint_list(request: HtmxHttpRequest) -> HttpResponse:
    context = _list_context(request)
    if request.htmx:
        response = render(request, "deployments/endpoint_list.html#rows", context)
        return _stop_if(response, not context["polling"])
    return render(request, "deployments/endpoint_list.html", context)


def _stop_if(response: HttpResponse, settled: bool) -> HttpResponse:
    if settled:
        response.status_code = HTMX_STOP_POLLING
    return response


@require_GET
@never_cache  # live status: a back-button copy would show it stale
@console_view
def endpoint_detail(request: HttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    revision = endpoint.target_revision
    context = {
        **_card_context(endpoint),
        "base_url": queries.inference_url(endpoint.slug),
        "host_url": queries.host_url(endpoint.slug),
        "served_model": _served_model(revision.spec if revision else {}),
        "tab": "overview",
        "accuracies": _accuracies(endpoint),
        "start_bars": start_bars(recent_starts(endpoint)),
        "start_phases": list(PHASE_LABELS.items()),
        "cluster_choices": fleet_queries.placement_choices(actor_of(request), endpoint),
        "placement_policies": PlacementPolicy.choices,
        "lora": queries.adapters_of(endpoint),
        **canary_context(endpoint),
    }
    return render(request, "deployments/endpoint_detail.html", context)


def _accuracies(endpoint: Deployment) -> list[ModelAccuracy]:
    """The model against measured for each revision that serves: the serving one, and a
    running canary's beside it."""
    now = timezone.now()
    revisions = [endpoint.current_revision]
    canary = running_canary(endpoint)
    if canary is not None and canary.revision != endpoint.current_revision:
        revisions.append(canary.revision)
    found = (model_accuracy(endpoint, now, r) for r in revisions if r is not None)
    return [accuracy for accuracy in found if accuracy is not None]


def _served_model(spec: dict[str, object]) -> str:
    model = spec.get("model") or {}
    if not isinstance(model, dict):
        return ""
    return str(model.get("served_name") or model.get("source") or "")


@require_GET
@never_cache  # live status: a back-button copy would show it stale
@console_view
def status_card(request: HttpRequest, slug: str) -> HttpResponse:
    try:
        endpoint = queries.get_endpoint(actor_of(request), slug)
    except NotFound:
        # Deleted while someone watched: say so and stop the poll (a 404 would keep it going).
        gone = render(request, "deployments/endpoint_gone.html", {"slug": slug})
        return _stop_if(gone, True)
    context = _card_context(endpoint)
    response = render(request, "deployments/endpoint_detail.html#status-card", context)
    return _stop_if(response, bool(context["settled"]))


def _card_context(endpoint: Deployment) -> dict[str, object]:
    """What the status card shows, all of it read now: the page and each poll render the same
    card from the same facts, so a poll never leaves a part of it behind."""
    return {
        "endpoint": endpoint,
        "status": endpoint.status,
        "settled": endpoint.settled,
        "target_note": _target_note(endpoint),
        "pools": queries.pool_status(endpoint),
        "placements": fleet_queries.placed_on(endpoint),  # its replicas per cluster
        "events": queries.recent_events(endpoint, limit=5),
    }


def _target_note(endpoint: Deployment) -> str:
    """What became of a target revision that is not the serving one."""
    target, current = endpoint.target_revision, endpoint.current_revision
    if target is None or target == current:
        return ""
    if endpoint.desired_state != "running":
        return f"r{target.number} is the target"
    if rolling_out(endpoint.facts()):
        return f"r{target.number} rolling out"
    return f"r{target.number} was not ready in time; rolled back"


def _run_action(request: HttpRequest, slug: str, action: str) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    try:
        if action == "scale":
            services.scale(actor, endpoint.pk, replicas=_int(request.POST.get("replicas")))
        elif action == "stop":
            services.stop(actor, endpoint.pk)
        elif action == "start":
            services.start(actor, endpoint.pk)
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("endpoint-detail", slug=endpoint.slug)


def _int(raw: str | None) -> int:
    try:
        return int(raw or "")
    except ValueError:
        raise ServiceError("replicas: enter a whole number", field="replicas") from None


@require_POST
@console_view
def endpoint_scale(request: HttpRequest, slug: str) -> HttpResponse:
    return _run_action(request, slug, "scale")


@require_POST
@console_view
def endpoint_stop(request: HttpRequest, slug: str) -> HttpResponse:
    return _run_action(request, slug, "stop")


@require_POST
@console_view
def endpoint_start(request: HttpRequest, slug: str) -> HttpResponse:
    return _run_action(request, slug, "start")


@console_view
def endpoint_delete(request: HttpRequest, slug: str) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    error = ""
    if request.method == "POST":
        if request.POST.get("confirm_slug", "").strip() != endpoint.slug:
            error = f"type {endpoint.slug} to confirm"
        else:
            try:
                services.delete_deployment(actor, endpoint.pk)
            except ServiceError as exc:
                error = exc.message
            else:
                messages.success(request, f"Endpoint {endpoint.slug} is being deleted.")
                return redirect("endpoint-list")
    context = {"endpoint": endpoint, "error": error, "tab": "settings"}
    status = 422 if error else 200
    return render(request, "deployments/endpoint_delete.html", context, status=status)
