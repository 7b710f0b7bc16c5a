"""The create/edit wizard: one settings form with live validation, memory fit and cost.

A new endpoint starts from a template (``?template=chat``, ``deployments.endpoints.presets``) or the
optimizer's pick (``?spec=``); the form opens on its Basics step with every other section
collapsed behind a summary. Every change posts the form to ``validate``, which answers the
estimate panel plus every field's issue slot and section summary as out-of-band swaps, so errors
appear next to their inputs as the person types. Saving calls one service: ``create_deployment``
or ``update_settings`` (a new revision; a Conflict when someone saved first).
"""

from __future__ import annotations

import json
from typing import Any

from django import forms as django_forms
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.access import require_role
from controlplane.guard import actor_of, console_view
from controlplane.models import Role
from controlplane.services import Conflict, ServiceError
from deployments.clusters import queries as cluster_queries
from deployments.endpoints import forms, presets, queries, recommend, services
from deployments.endpoints.models import Deployment
from runtime.issues import Issue, error
from runtime.optimize import OptimizeRequest, Slo, Traffic
from runtime.validate import check, estimate, has_errors


def _evaluate(post: QueryDict, base: dict[str, Any] | None) -> dict[str, Any]:
    """Parse and check the posted settings: the issues, the estimate, the values to re-show."""
    parsed = forms.parse_spec(post, base)
    spec, issues = check(parsed.data) if not parsed.issues else (None, [])
    issues = parsed.issues + issues
    values = forms.posted_values(post, parsed)
    return {
        "data": parsed.data,
        "issues": issues,
        "estimate": estimate(spec) if spec is not None else None,
        "values": values,
    }


def _form_context(values: dict[str, Any], issues: list[Issue], est: Any) -> dict[str, Any]:
    grouped = forms.issues_by_field(issues)
    return {
        "sections": forms.bind(values, issues),
        "general_issues": [forms.ShownIssue(i) for i in grouped.get("", [])],
        "tp_for": forms.tp_key(values),
        "estimate": est,
        "memory": _memory_bar(est),
        "models": forms.model_choices(),
        "custom_arch": forms.uses_custom_architecture(values),
        "error_count": sum(1 for i in issues if i.is_error),
        "warnings": [forms.ShownIssue(i) for i in issues if not i.is_error],
        "presets": presets.PRESETS,
    }


def _memory_bar(est: Any) -> list[dict[str, Any]]:
    """Segments of the per-GPU memory bar, as percentages of the GPU's memory."""
    if est is None or est.total_gib is None:
        return []
    capacity = est.capacity_gib or 1
    parts = [("weights", est.weights_gib), ("kv", est.kv_cache_gib), ("reserve", est.reserve_gib)]
    segments, offset = [], 0.0
    for name, gib in parts:
        pct = round(min(100, 100 * (gib or 0) / capacity), 1)
        # Drawn as SVG rects (x, width): the CSP allows no inline style="width:…".
        segments.append({"name": name, "gib": gib, "pct": pct, "offset": round(offset, 1)})
        offset += pct
    return segments


@require_POST
@console_view
def validate_settings(request: HttpRequest) -> HttpResponse:
    """The live check (htmx): estimate panel + out-of-band issue slots for every field."""
    base = _edit_base(request)
    result = _evaluate(request.POST, base)
    context = _form_context(result["values"], result["issues"], result["estimate"])
    # The TP choices follow the model's heads: sent again only when those changed, so a person
    # choosing a TP never has the select replaced under them.
    context["tp_refresh"] = request.POST.get("tp_for", "") != context["tp_for"]
    return render(request, "deployments/wizard.html#validation", context)


def _edit_base(request: HttpRequest) -> dict[str, Any] | None:
    slug = request.POST.get("endpoint", "")
    if not slug:
        return None
    endpoint = queries.get_endpoint(actor_of(request), slug)
    return endpoint.target_revision.spec if endpoint.target_revision else None


@require_http_methods(["GET", "POST"])
@console_view
def endpoint_create(request: HttpRequest) -> HttpResponse:
    actor = actor_of(request)
    require_role(actor, Role.DEVELOPER)
    clusters = list(cluster_queries.clusters_for(actor))
    if request.method == "GET":
        chosen = presets.preset(request.GET.get("template", ""))
        prefill = chosen.spec_copy() if chosen else _prefilled_spec(request)
        values = forms.initial_values(prefill)
        spec, _ = check(prefill or forms.DEFAULT_SPEC)
        context = _form_context(values, [], estimate(spec) if spec else None)
        context.update(clusters=clusters, rec_form=RecommendForm(prefix="rec"))
        if chosen:
            # Named after the template so "Create" is the only click left.
            context.update(template=chosen.key, meta={"slug": queries.free_slug(chosen.slug)})
        elif prefill:
            context["prefilled_from"] = request.GET.get("from", "")[:200] or "a recommendation"
        return render(request, "deployments/wizard.html", context)
    result = _evaluate(request.POST, None)
    issues = result["issues"]
    meta = {k: request.POST.get(k, "").strip() for k in ("slug", "name", "cluster", "message")}
    if not has_errors(issues):
        try:
            endpoint = services.create_deployment(
                actor,
                slug=meta["slug"],
                name=meta["name"] or meta["slug"],
                spec=result["data"],
                cluster_id=meta["cluster"] or None,
                message=meta["message"],
            )
        except ServiceError as exc:
            issues = [*issues, *_issues_of(exc)]
        else:
            return redirect("endpoint-detail", slug=endpoint.slug)
    context = _form_context(result["values"], issues, result["estimate"])
    context.update(clusters=clusters, meta=meta, meta_error=_meta_error(issues))
    context["rec_form"] = RecommendForm(prefix="rec")
    return render(request, "deployments/wizard.html", context, status=422)


def _prefilled_spec(request: HttpRequest) -> dict[str, Any] | None:
    """``?spec=<json>`` (the optimizer's "Deploy this"): settings to start from, or None."""
    raw = request.GET.get("spec")
    if not raw:
        return None
    try:
        spec = json.loads(raw)
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None


# ---- "Recommend settings": the optimizer, for the wizard's model and GPU --------------------
class RecommendForm(django_forms.Form):
    """A small traffic profile and the latency targets (the optimizer page has every knob)."""

    input_tokens = django_forms.IntegerField(min_value=1, max_value=1_000_000, initial=1024)
    output_tokens = django_forms.IntegerField(min_value=1, max_value=1_000_000, initial=256)
    rate_rps = django_forms.FloatField(min_value=0.001, max_value=100_000, initial=1.0)
    ttft_ms = django_forms.FloatField(min_value=1, max_value=600_000, initial=1000)
    itl_ms = django_forms.FloatField(min_value=0.1, max_value=60_000, initial=50)

    def request_for(self, model: str, gpu: str) -> OptimizeRequest:
        d = self.cleaned_data
        return OptimizeRequest(
            model=model,
            gpus=(gpu,) if gpu else (),
            traffic=Traffic(d["input_tokens"], d["output_tokens"], rate_rps=d["rate_rps"]),
            slo=Slo(ttft_p90_s=d["ttft_ms"] / 1000, itl_p90_s=d["itl_ms"] / 1000),
        )


@require_POST
@console_view
def wizard_recommend(request: HttpRequest) -> HttpResponse:
    """Fill the create form with the optimizer's pick for its model and GPU and the traffic."""
    actor = actor_of(request)
    require_role(actor, Role.DEVELOPER)
    result = _evaluate(request.POST, None)
    values, issues, est = result["values"], result["issues"], result["estimate"]
    rec_form = RecommendForm(request.POST, prefix="rec")
    pick, problem = None, ""
    if rec_form.is_valid():
        model = request.POST.get("model.source", "").strip()
        gpu = request.POST.get("hardware.gpu", "").strip()
        try:
            data = recommend.recommend(actor, rec_form.request_for(model, gpu))
        except ServiceError as exc:
            problem = exc.message
        else:
            pick = data["best"]
            problem = "" if pick else " ".join(data["notes"]) or "nothing meets the targets"
    else:
        problem = "check the traffic figures"
    if pick is not None:
        values = forms.initial_values(pick["spec"])
        spec, issues = check(pick["spec"])
        est = estimate(spec) if spec is not None else None
    meta = {k: request.POST.get(k, "").strip() for k in ("slug", "name", "cluster", "message")}
    context = _form_context(values, issues, est)
    context.update(
        clusters=list(cluster_queries.clusters_for(actor)),
        meta=meta,
        rec_form=rec_form,
        recommendation=pick,
        recommend_problem=problem,
    )
    return render(request, "deployments/wizard.html", context)


def _issues_of(exc: ServiceError) -> list[Issue]:
    """A service refusal as issues: each spec error on its field, else the one message."""
    found = getattr(exc, "issues", None) or []
    if found:
        return [
            error(i["field"].removeprefix("spec."), i["code"], i["message"], i.get("fix"))
            for i in found
        ]
    return [error((exc.field or "").removeprefix("spec."), exc.code, exc.detail)]


def _meta_error(issues: list[Issue]) -> dict[str, str]:
    return {i.field: i.message for i in issues if i.field in ("slug", "name", "cluster")}


@require_http_methods(["GET", "POST"])
@console_view
def endpoint_edit(request: HttpRequest, slug: str) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    current = endpoint.target_revision
    base_spec = current.spec if current else None
    if request.method == "GET":
        values = forms.initial_values(base_spec)
        spec, _ = check(base_spec or forms.DEFAULT_SPEC)
        context = _form_context(values, [], estimate(spec) if spec else None)
        context.update(endpoint=endpoint, base_revision=current.number if current else 0)
        # Viewers read the settings; the inputs are shown read-only and there is no save.
        context["readonly"] = not actor.has_role(Role.DEVELOPER)
        return render(request, "deployments/wizard.html", {**context, "tab": "settings"})
    return _save_edit(request, endpoint, base_spec)


def _save_edit(
    request: HttpRequest, endpoint: Deployment, base_spec: dict[str, Any] | None
) -> HttpResponse:
    result = _evaluate(request.POST, base_spec)
    issues, conflict = result["issues"], None
    base_revision = _posted_int(request.POST.get("base_revision"))
    if not has_errors(issues):
        try:
            services.update_settings(
                actor_of(request),
                endpoint.pk,
                spec=result["data"],
                base_revision=base_revision,
                message=request.POST.get("message", "").strip(),
            )
        except Conflict as exc:
            conflict = {"message": exc.message, "target": _target_number(request, endpoint)}
        except ServiceError as exc:
            issues = [*issues, *_issues_of(exc)]
        else:
            return redirect("endpoint-revisions", slug=endpoint.slug)
    context = _form_context(result["values"], issues, result["estimate"])
    context.update(
        endpoint=endpoint,
        base_revision=base_revision,
        conflict=conflict,
        tab="settings",
        message=request.POST.get("message", ""),
    )
    return render(request, "deployments/wizard.html", context, status=409 if conflict else 422)


def _posted_int(raw: str | None) -> int:
    try:
        return int(raw or "0")
    except ValueError:
        return 0


def _target_number(request: HttpRequest, endpoint: Deployment) -> int:
    """The revision to edit from again: the target now, the base the save is checked against
    (not the newest revision, which may be a canary's)."""
    target = queries.get_endpoint(actor_of(request), endpoint.slug).target_revision
    return target.number if target else 0
