"""The endpoint's Benchmarks tab: queue one (a form), the list, one benchmark's results beside the
optimizer's prediction with a chart, and two compared. Every write is one ``benchmarks`` call.

A benchmark's page polls (htmx) only while it is queued or running, and the first answer after
it finished is 286, which stops htmx polling.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods
from django_htmx.http import HTMX_STOP_POLLING

from controlplane.guard import HtmxHttpRequest, actor_of, console_view
from controlplane.services import ServiceError
from deployments.endpoints import queries
from deployments.endpoints.charts import Point, Scatter
from deployments.experiments.benchmark import services as benchmarks
from deployments.experiments.benchmark.profile import LATENCIES, TrafficProfile
from deployments.experiments.models import Benchmark

_FORM_FIELDS = ("input_tokens", "output_tokens", "duration_s", "turns")


def _profile_from_form(data: Any) -> dict[str, Any]:
    """The form's fields as the API's profile: numbers parsed, blanks left to the defaults. A
    value that is not a number goes through as text, so the service names its field."""
    profile: dict[str, Any] = {}
    for name in (*_FORM_FIELDS, "shared_prefix", "request_rate"):
        raw = (data.get(name) or "").strip()
        if raw:
            try:
                profile[name] = (
                    float(raw) if name in ("shared_prefix", "request_rate") else int(raw)
                )
            except ValueError:
                profile[name] = raw
    sweep = (data.get("concurrency") or "").replace(" ", "")
    if sweep and "request_rate" not in profile:
        try:
            profile["concurrency"] = [int(c) for c in sweep.split(",") if c]
        except ValueError:
            profile["concurrency"] = sweep
    return profile


@require_http_methods(["GET", "POST"])
@console_view
def benchmark_list(request: HttpRequest, slug: str) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    if request.method == "POST":
        try:
            created = benchmarks.create_benchmark(
                actor,
                endpoint.pk,
                profile=_profile_from_form(request.POST),
                name=request.POST.get("name", ""),
            )
        except ServiceError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, "Benchmark queued.")
            return redirect(reverse("benchmark-detail", args=[slug, created.pk]))
    rows = list(benchmarks.list_benchmarks(actor, endpoint.pk)[:50])
    context = {
        "endpoint": endpoint,
        "tab": "benchmarks",
        "benchmarks": rows,
        "defaults": TrafficProfile(),
        "form": request.POST if request.method == "POST" else {},
    }
    return render(request, "deployments/benchmarks.html", context)


def point_rows(benchmark: Benchmark) -> list[dict[str, Any]]:
    """One row per load point: what was measured, and the optimizer's p90s for it."""
    predicted = {(p["kind"], float(p["value"])): p for p in benchmark.prediction}
    rows = []
    for point in benchmark.results:
        guess = predicted.get((point["kind"], float(point["value"])), {})
        lat = point.get("latency_ms", {})
        rows.append({"point": point, "latency": lat, "predicted": guess})
    return rows


def latency_chart(benchmark: Benchmark, metric: str, title: str) -> Scatter:
    """p50/p90 measured and the predicted p90 of one latency, against the load."""
    measured: dict[str, list[Point]] = {"p50": [], "p90": []}
    for point in benchmark.results:
        figures = point.get("latency_ms", {}).get(metric, {})
        for pct in measured:
            if figures.get(pct) is not None:
                label = f"{point['kind']} {point['value']:g}"
                measured[pct].append(Point(float(point["value"]), float(figures[pct]), label))
    predicted = [
        Point(float(p["value"]), float(p[f"{metric}_p90_ms"]), "predicted")
        for p in benchmark.prediction
        if p.get(f"{metric}_p90_ms") is not None
    ]
    x_unit = "users" if benchmark.profile.get("request_rate") is None else "req/s"
    groups = [("measured p50", measured["p50"]), ("measured p90", measured["p90"])]
    return Scatter(
        title=title, x_unit=x_unit, unit="ms", groups=[*groups, ("predicted p90", predicted)]
    )


@require_GET
@console_view
def benchmark_detail(request: HtmxHttpRequest, slug: str, benchmark_id: str) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    benchmark = benchmarks.get_benchmark(actor, endpoint.pk, benchmark_id)
    live = benchmark.status in benchmarks.ACTIVE
    context = {
        "endpoint": endpoint,
        "tab": "benchmarks",
        "benchmark": benchmark,
        "rows": point_rows(benchmark),
        "charts": [
            latency_chart(benchmark, "ttft", "Time to first token"),
            latency_chart(benchmark, "itl", "Inter-token latency"),
            latency_chart(benchmark, "e2e", "End-to-end latency"),
        ]
        if benchmark.results
        else [],
        "live": live,
    }
    if request.htmx:
        response = render(request, "deployments/benchmark_detail.html#result", context)
        if not live:
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, "deployments/benchmark_detail.html", context)


@require_GET
@console_view
def benchmark_compare(request: HttpRequest, slug: str) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    a, b = request.GET.get("a", ""), request.GET.get("b", "")
    compared = benchmarks.compare_benchmarks(actor, endpoint.pk, a, b)
    rows = []
    for point in compared["points"]:
        for metric, delta in sorted(point["metrics"].items()):
            # Lower is better for latencies and errors, higher for throughput.
            better = (
                delta["delta"] > 0
                if metric in ("output_tokens_per_s", "requests_per_s")
                else (delta["delta"] < 0)
            )
            rows.append(
                {"point": point, "metric": metric, **delta, "better": better and delta["delta"]}
            )
    context = {
        "endpoint": endpoint,
        "tab": "benchmarks",
        "a": compared["a"],
        "b": compared["b"],
        "rows": rows,
        "metrics": LATENCIES,
    }
    return render(request, "deployments/benchmark_compare.html", context)
