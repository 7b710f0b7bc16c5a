"""Console pages of an endpoint's history and telemetry: revisions (diff, rollback), metrics
charts, the events timeline and per-replica log tails."""

from __future__ import annotations

import itertools
from datetime import timedelta

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from controlplane.guard import HtmxHttpRequest, actor_of, console_view
from controlplane.services import ServiceError
from deployments import logs, queries, services
from deployments.charts import Chart, Series
from deployments.diff import diff_revisions
from deployments.models import MetricSample
from deployments.status import NOT_SERVING


@require_GET
@console_view
def revision_list(request: HttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    revisions = queries.revisions_of(endpoint)
    # Each revision's changes against the one before it, computed in memory (no extra queries).
    changes = {
        newer.number: diff_revisions(older.spec, newer.spec)
        for newer, older in itertools.pairwise(revisions)
    }
    rows = [(r, changes.get(r.number, [])) for r in revisions]
    context = {"endpoint": endpoint, "rows": rows, "tab": "revisions"}
    return render(request, "deployments/revisions.html", context)


@require_GET
@console_view
def revision_diff(request: HttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    a = queries.get_revision(endpoint, _number(request.GET.get("a")))
    b = queries.get_revision(endpoint, _number(request.GET.get("b")))
    context = {"endpoint": endpoint, "a": a, "b": b, "changes": diff_revisions(a.spec, b.spec)}
    return render(request, "deployments/revision_diff.html", {**context, "tab": "revisions"})


def _number(raw: str | None) -> int:
    try:
        return int(raw or "")
    except ValueError:
        return 0


@require_POST
@console_view
def revision_rollback(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    target = queries.get_revision(endpoint, number)
    try:
        services.rollback(
            actor,
            endpoint.pk,
            to_revision=target.number,
            message=request.POST.get("message", "").strip(),
        )
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Rolling back to revision {target.number}.")
    return redirect("endpoint-revisions", slug=endpoint.slug)


def metric_charts(samples: list[MetricSample], minutes: int) -> list[Chart]:
    """The endpoint's charts over the last ``minutes``: the x axis is that window, not the
    samples' own span, so a few samples sit where they happened rather than filling the width."""
    times = [s.ts for s in samples]
    end = timezone.now()
    start = end - timedelta(minutes=minutes)

    def series(label: str, attr: str, scale: float = 1.0) -> Series:
        values = [getattr(s, attr) for s in samples]
        return Series(label, [None if v is None else v * scale for v in values])

    def chart(title: str, unit: str, *lines: Series) -> Chart:
        return Chart(title, unit, times, lines, start=start, end=end)

    return [
        chart("Requests", "req/s", series("req/s", "requests_per_s")),
        chart("Tokens", "tok/s", series("tok/s", "tokens_per_s")),
        chart("TTFT", "ms", series("p50", "ttft_p50", 1000), series("p90", "ttft_p90", 1000)),
        chart("ITL", "ms", series("p50", "itl_p50", 1000), series("p90", "itl_p90", 1000)),
        chart(
            "Requests in engine", "count", series("running", "running"), series("queued", "queued")
        ),
        chart("KV cache usage", "%", series("KV", "kv_usage", 100)),
        chart("Prefix cache hit rate", "%", series("hit rate", "cache_hit_rate", 100)),
        chart("Speculator accept length", "tokens", series("accept", "spec_accept_length")),
        chart("Replicas ready", "count", series("ready", "replicas_ready")),
    ]


@require_GET
@console_view
def endpoint_metrics(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    minutes = {"15": 15, "60": 60, "360": 360}.get(request.GET.get("window", "60"), 60)
    samples = queries.recent_samples(endpoint, minutes=minutes)
    context = {
        "endpoint": endpoint,
        "charts": metric_charts(samples, minutes),
        "window": str(minutes),
        # Refresh only while the endpoint runs; a stopped one produces no new samples.
        "live": endpoint.status not in NOT_SERVING,
        "tab": "metrics",
    }
    if request.htmx:
        return render(request, "deployments/metrics.html#charts", context)
    return render(request, "deployments/metrics.html", context)


@require_GET
@console_view
def endpoint_events(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    context = {"endpoint": endpoint, "events": queries.recent_events(endpoint, limit=200)}
    if request.htmx:
        return render(request, "deployments/events.html#timeline", context)
    return render(request, "deployments/events.html", {**context, "tab": "events"})


@require_GET
@console_view
def endpoint_logs(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    found = logs.read_logs(endpoint, request.GET.get("replica"), lines=300)
    context = {
        "endpoint": endpoint,
        "replicas": found.replicas,
        "replica": found.replica,
        "lines": found.lines,
        "unavailable": found.unavailable,
        "tab": "logs",
    }
    if request.htmx:
        return render(request, "deployments/logs.html#tail", context)
    return render(request, "deployments/logs.html", context)
