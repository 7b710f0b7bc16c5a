"""The quantization pages: the runs (start one, upload calibration samples), one run (its
progress, per-layer sensitivity and the candidates' frontier, quality against throughput, as
an inline SVG chart; deploy a candidate) and the artifacts with their provenance. Every write
is one ``services`` call. A run's page polls (htmx) only while the run is queued or running;
the first answer after it ended is 286, which stops the polling.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HTMX_STOP_POLLING

from controlplane.guard import HtmxHttpRequest, actor_of, console_view
from controlplane.services import ServiceError
from deployments.endpoints.queries import deployments_of
from deployments.quantization import queries, services
from deployments.quantization.frontier import Comparison, compare, speed_of
from deployments.quantization.recipes import FORMATS

# The chart's drawing box (SVG user units); points keep a margin from its edges.
WIDTH, HEIGHT, MARGIN = 100.0, 60.0, 6.0


def _recipes_from_form(raw: str) -> list[dict[str, Any]] | None:
    if not raw.strip():
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        raise ServiceError("recipes: not JSON", field="recipes") from None
    return parsed if isinstance(parsed, list) else [parsed]


@require_http_methods(["GET", "POST"])
@console_view
def run_list(request: HttpRequest) -> HttpResponse:
    actor = actor_of(request)
    if request.method == "POST":
        form = request.POST
        try:
            run = services.start_run(
                actor,
                format=form.get("format", ""),
                source_model=form.get("source_model", "").strip(),
                deployment=form.get("deployment") or None,
                recipes=_recipes_from_form(form.get("recipes", "")),
                propose=form.get("propose") == "on",
                calibration_set=form.get("calibration_set") or None,
                gpu=form.get("gpu", "").strip(),
                name=form.get("name", ""),
            )
        except ServiceError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, "Quantization run queued.")
            return redirect(reverse("quantization-run", args=[run.pk]))
    context = {
        "runs": list(queries.runs_of(actor)[:50]),
        "formats": FORMATS,
        "endpoints": list(deployments_of(actor).order_by("slug")[:200]),
        "calibration_sets": list(queries.calibration_sets_of(actor).filter(purged_at=None)),
        "form": request.POST if request.method == "POST" else {},
    }
    return render(request, "deployments/quantization.html", context)


@require_POST
@console_view
def calibration_upload(request: HttpRequest) -> HttpResponse:
    upload = request.FILES.get("file")
    text = upload.read().decode(errors="replace") if upload else request.POST.get("samples", "")
    try:
        services.upload_calibration_set(
            actor_of(request), name=request.POST.get("name", ""), samples=text
        )
    except ServiceError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Calibration samples uploaded.")
    return redirect(reverse("quantization"))


def frontier_chart(comparison: Comparison) -> dict[str, Any]:
    """Each candidate as a point (x: speed, y: mean KL, lower is up), the frontier as a line,
    in the SVG's user units."""
    points = comparison.candidates
    if not points:
        return {"points": [], "line": ""}
    speeds = [speed_of(c) for c in points]
    kls = [c.mean_kl for c in points]

    def scale(value: float, low: float, high: float, size: float) -> float:
        span = high - low
        return MARGIN + (size - 2 * MARGIN) * ((value - low) / span if span else 0.5)

    on = {c.name for c in comparison.frontier}
    placed: list[dict[str, Any]] = [
        {
            "name": c.name,
            "x": round(scale(speed_of(c), min(speeds), max(speeds), WIDTH), 2),
            "y": round(HEIGHT - scale(c.mean_kl, min(kls), max(kls), HEIGHT), 2),
            "kl": c.mean_kl,
            "speed": speed_of(c),
            "frontier": c.name in on,
        }
        for c in points
    ]
    line = " ".join(
        f"{p['x']},{p['y']}" for p in sorted(placed, key=lambda p: p["x"]) if p["frontier"]
    )
    return {"points": placed, "line": line, "priced": any(c.price for c in points)}


@require_GET
@console_view
def run_detail(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    actor = actor_of(request)
    run = queries.get_run(actor, run_id)
    candidates = queries.candidates_of(run)
    comparison = compare(candidates)
    top = max((abs(float(s.get("kl", 0))) for s in run.sensitivity), default=0.0) or 1.0
    context = {
        "run": run,
        "live": not run.finished,
        "candidates": candidates,
        "frontier": {c.name for c in comparison.frontier},
        "chart": frontier_chart(comparison),
        "sensitivity": [
            {**s, "pct": round(100 * abs(float(s.get("kl", 0))) / top, 2)} for s in run.sensitivity
        ],
        "endpoints": list(deployments_of(actor).order_by("slug")[:200]),
    }
    if request.htmx:
        response = render(request, "deployments/quantization_run.html#progress", context)
        if run.finished:
            response.status_code = HTMX_STOP_POLLING
        return response
    return render(request, "deployments/quantization_run.html", context)


@require_POST
@console_view
def run_deploy(request: HttpRequest, run_id: str) -> HttpResponse:
    form = request.POST
    try:
        done = services.deploy_candidate(
            actor_of(request),
            run_id,
            form.get("candidate", ""),
            deployment=form.get("deployment", ""),
            mode=form.get("mode", "canary"),
        )
    except ServiceError as exc:
        messages.error(request, str(exc))
        return redirect(reverse("quantization-run", args=[run_id]))
    what = "a canary with its KL gate" if done["mode"] == "canary" else "a new revision"
    messages.success(request, f"Deployed as {what}: revision {done['revision']}.")
    return redirect(reverse("endpoint-detail", args=[form.get("deployment", "")]))


@require_POST
@console_view
def run_cancel(request: HttpRequest, run_id: str) -> HttpResponse:
    try:
        services.cancel_run(actor_of(request), run_id)
    except ServiceError as exc:
        messages.error(request, str(exc))
    return redirect(reverse("quantization-run", args=[run_id]))


@require_GET
@console_view
def artifact_list(request: HttpRequest) -> HttpResponse:
    artifacts = list(queries.artifacts_of(actor_of(request))[:200])
    return render(request, "deployments/quantized_models.html", {"artifacts": artifacts})
