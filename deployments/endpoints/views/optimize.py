"""The optimizer page: a traffic profile and SLOs in, the cheapest configuration out.

The form is a GET (asking changes nothing, so a result can be bookmarked and shared); htmx swaps
the form and its results in place. Everything is ``deployments.endpoints.recommend``'s: the same
service as ``POST /api/v1/optimize`` and the wizard's "Recommend settings". From a candidate,
"Deploy this" opens the create wizard prefilled with its spec, and "Apply to endpoint" posts it to
``optimize_apply``, which makes it the endpoint's next revision with a message saying where it
came from, or (``as=canary``) starts it as a canary at a weight with a quality gate and a
benchmark (``quality_services.start_experiment``).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from controlplane.access import Actor, NotFound
from controlplane.guard import actor_of, console_view
from controlplane.models import Role
from controlplane.services import ServiceError
from deployments.clusters import queries as cluster_queries
from deployments.endpoints import queries, recommend
from deployments.endpoints.charts import Point, Scatter
from deployments.endpoints.forms import model_choices
from deployments.experiments.quality import services as quality_services
from runtime.catalog import list_gpus
from runtime.optimize import Limits, OptimizeRequest, Slo, Traffic


class OptimizeForm(forms.Form):
    """The traffic profile, the SLOs and the limits, in the units people think in (ms)."""

    model = forms.CharField(max_length=200, initial="meta-llama/Llama-3.1-8B-Instruct")
    gpus = forms.MultipleChoiceField(required=False, choices=())
    cluster = forms.CharField(required=False, max_length=100)
    # Recommend for this endpoint (a slug): its own traffic corrects the model's latencies.
    endpoint = forms.CharField(required=False, max_length=100)
    input_tokens = forms.IntegerField(min_value=1, max_value=1_000_000, initial=1024)
    output_tokens = forms.IntegerField(min_value=1, max_value=1_000_000, initial=256)
    rate_rps = forms.FloatField(required=False, min_value=0.001, max_value=100_000)
    concurrency = forms.IntegerField(required=False, min_value=1, max_value=1_000_000)
    prefix_share = forms.FloatField(min_value=0, max_value=0.99, initial=0.0)
    turns = forms.IntegerField(min_value=1, max_value=100, initial=1)
    ttft_ms = forms.FloatField(min_value=1, max_value=600_000, initial=1000)
    itl_ms = forms.FloatField(min_value=0.1, max_value=60_000, initial=50)
    max_cost = forms.FloatField(required=False, min_value=0.01)
    max_gpus = forms.IntegerField(required=False, min_value=1, max_value=4096)
    # cost: the cheapest layout carrying the rate; throughput: the most output tokens/s per GPU
    # within the targets, each layout sized to the GPU budget (max GPUs, else one node).
    objective = forms.ChoiceField(
        choices=[("cost", "Cheapest for the rate"), ("throughput", "Most tokens/s per GPU")],
        initial="cost",
        required=False,  # a query without it (older links) asks the default question
    )
    confirm = forms.BooleanField(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        gpu_field = self.fields["gpus"]
        assert isinstance(gpu_field, forms.MultipleChoiceField)
        gpu_field.choices = [(g.id, g.id) for g in list_gpus()]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("rate_rps") is not None and data.get("concurrency") is not None:
            self.add_error("concurrency", "give a rate or a concurrency, not both")
        return data

    def request(self) -> OptimizeRequest:
        d = self.cleaned_data
        rate = d["rate_rps"] if d["rate_rps"] is not None or d["concurrency"] else 1.0
        return OptimizeRequest(
            model=d["model"].strip(),
            gpus=tuple(d["gpus"]),
            traffic=Traffic(
                input_tokens=d["input_tokens"],
                output_tokens=d["output_tokens"],
                rate_rps=rate,
                concurrency=d["concurrency"],
                prefix_share=d["prefix_share"],
                turns=d["turns"],
            ),
            slo=Slo(ttft_p90_s=d["ttft_ms"] / 1000, itl_p90_s=d["itl_ms"] / 1000),
            limits=Limits(max_cost_per_hour=d["max_cost"], max_gpus=d["max_gpus"]),
            objective="throughput" if d["objective"] == "throughput" else "cost",
        )


def _initial_query() -> QueryDict:
    query = QueryDict(mutable=True)
    for name, field in OptimizeForm.base_fields.items():
        if field.initial is not None:
            query[name] = str(field.initial)
    return query


@require_GET
@console_view
def optimize_page(request: HttpRequest) -> HttpResponse:
    actor = actor_of(request)
    asked = "model" in request.GET
    form = OptimizeForm(request.GET if asked else _initial_query())
    context: dict[str, Any] = {
        "form": form,
        "models": model_choices(),
        "clusters": list(cluster_queries.clusters_for(actor)),
        "endpoints": list(
            queries.deployments_of(actor).order_by("slug").values_list("slug", flat=True)
        ),
        "query": request.GET.urlencode(),
    }
    if asked and form.is_valid():
        try:
            data = recommend.recommend(
                actor,
                form.request(),
                cluster_id=form.cleaned_data["cluster"] or None,
                confirm=form.cleaned_data["confirm"],
                deployment_id=form.cleaned_data["endpoint"] or None,
            )
        except ServiceError as exc:
            field = "endpoint" if exc.field == "deployment_id" else exc.field
            form.add_error(field if field in form.fields else None, exc.detail)
        except NotFound:
            form.add_error("endpoint", "no such endpoint in this organization")
        else:
            context.update(_results(actor, data))
    # htmx swaps only 2xx answers: refused input goes back to it as 200, shown by its fields.
    refused = asked and bool(form.errors) and not getattr(request, "htmx", False)
    return render(request, "deployments/optimize.html", context, status=422 if refused else 200)


def _results(actor: Actor, data: dict[str, Any]) -> dict[str, Any]:
    """The service's answer, plus what the page draws from it."""
    endpoints = _endpoints_by_model(actor)
    for candidate in _candidates(data):
        candidate["apply_to"] = endpoints.get(candidate["spec"]["model"]["source"], [])
        candidate["spec_json"] = json.dumps(candidate["spec"], separators=(",", ":"))
        candidate["wizard_url"] = (
            reverse("endpoint-create")
            + "?"
            + urlencode({"spec": candidate["spec_json"], "from": candidate["label"]})
        )
    return {
        "result": data,
        "pareto_chart": _pareto_chart(data),
        "waterfall": _waterfall(data),
    }


def _candidates(data: dict[str, Any]) -> list[dict[str, Any]]:
    out = [*data["ranked"], *data["pareto"], *(w["candidate"] for w in data["waterfall"])]
    if data["best"] is not None:
        out.append(data["best"])
    return [c for c in out if c is not None]


def _pareto_chart(data: dict[str, Any]) -> Scatter:
    def point(c: dict[str, Any]) -> Point:
        p = c["predicted"]
        return Point(p["cost_per_hour"], p["capacity_rps"], c["label"])

    front = {c["label"] for c in data["pareto"]}
    others = [point(c) for c in data["ranked"] if c["label"] not in front]
    return Scatter(
        title="Pareto front",
        x_unit="$/h",
        unit="req/s",
        groups=[("Pareto front", [point(c) for c in data["pareto"]]), ("Other candidates", others)],
    )


def _waterfall(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One bar per step: the cheapest configuration meeting the SLOs with the features so far."""
    costs = [
        w["candidate"]["predicted"]["cost_per_hour"] for w in data["waterfall"] if w["candidate"]
    ]
    peak = max(costs, default=0.0) or 1.0
    rows = []
    for w in data["waterfall"]:
        cand = w["candidate"]
        cost = cand["predicted"]["cost_per_hour"] if cand else None
        pct = round(100 * cost / peak, 1) if cost is not None else 0.0
        rows.append({"step": w["step"], "candidate": cand, "cost": cost, "pct": pct})
    return rows


def _endpoints_by_model(actor: Actor) -> dict[str, list[str]]:
    """Slugs of the organization's endpoints by the model they serve (where to apply a pick)."""
    out: dict[str, list[str]] = {}
    for endpoint in queries.deployments_of(actor, with_specs=True).order_by("slug"):
        target = endpoint.target_revision
        source = ((target.spec if target else {}).get("model") or {}).get("source")
        if source:
            out.setdefault(source, []).append(endpoint.slug)
    return out


@require_POST
@console_view
def optimize_apply(request: HttpRequest) -> HttpResponse:
    """A candidate as an endpoint's next revision, then that endpoint's revision list."""
    actor = actor_of(request)
    back = reverse("optimize") + "?" + QueryDict(request.POST.get("query", "")).urlencode()
    slug = request.POST.get("endpoint", "").strip()
    label = request.POST.get("label", "").strip()[:200]
    try:
        spec = json.loads(request.POST.get("spec", ""))
    except ValueError:
        spec = None
    if not isinstance(spec, dict) or not slug:
        messages.error(request, "Choose an endpoint to apply the recommendation to.")
        return redirect(back)
    if not actor.has_role(Role.DEVELOPER):
        messages.error(request, "Applying settings needs the developer role.")
        return redirect(back)
    if request.POST.get("as") == "canary":
        return _apply_as_canary(request, actor, slug, spec, label, back)
    try:
        revision = recommend.apply_candidate(actor, slug, spec, label or "recommended settings")
    except ServiceError as exc:
        messages.error(request, f"Not applied: {exc.detail}")
        return redirect(back)
    messages.success(
        request, f"Revision {revision.number} of {slug}: {recommend.optimizer_message(label)}."
    )
    return redirect("endpoint-revisions", slug=slug)


def _apply_as_canary(
    request: HttpRequest, actor: Actor, slug: str, spec: dict[str, Any], label: str, back: str
) -> HttpResponse:
    """The candidate as a canary of the endpoint at the form's weight, with a quality gate and
    a benchmark when ticked (one ``quality_services.start_experiment``), then its Experiments."""
    try:
        weight = int(request.POST.get("weight", ""))
    except ValueError:
        messages.error(request, "The canary's weight is a whole number of percent.")
        return redirect(back)
    try:
        canary, gate, benchmark = quality_services.start_experiment(
            actor, slug, spec, weight=weight, gate=request.POST.get("gate") == "on",
            benchmark=request.POST.get("benchmark") == "on", label=label,
        )  # fmt: skip
    except ServiceError as exc:
        messages.error(request, f"Not applied: {exc.detail}")
        return redirect(back)
    extras = [name for name, made in (("a quality gate", gate), ("a benchmark", benchmark)) if made]
    messages.success(
        request,
        f"Revision {canary.revision.number} of {slug} runs as a canary at {canary.weight}%"
        + (f" with {' and '.join(extras)}" if extras else "")
        + ".",
    )
    return redirect("endpoint-experiments", slug=slug)
