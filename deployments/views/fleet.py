"""Console pages across endpoints: clusters (where endpoints run) and usage per key and endpoint."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.db.models import Count, QuerySet, Sum
from django.db.models.functions import TruncHour
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.guard import actor_of, console_view
from controlplane.models import Role, Secret
from controlplane.services import ServiceError
from deployments import queries, services
from deployments.charts import Chart, Series
from deployments.models import UsageRecord

WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


@require_http_methods(["GET", "POST"])
@console_view
def cluster_list(request: HttpRequest) -> HttpResponse:
    actor = actor_of(request)
    error, form = {}, {}
    if request.method == "POST":
        form = {k: request.POST.get(k, "").strip() for k in ("name", "namespace", "kubeconfig")}
        try:
            services.create_cluster(
                actor,
                name=form["name"],
                kind="kubernetes",
                namespace=form["namespace"] or "plinth",
                kubeconfig_secret_id=form["kubeconfig"] or None,
            )
        except ServiceError as exc:
            error = {"field": exc.field or "", "message": exc.message}
        else:
            messages.success(request, f"Cluster {form['name']} added.")
            return redirect("cluster-list")
    clusters = queries.clusters_for(actor).annotate(endpoints=Count("deployments"))
    context = {
        "clusters": clusters,
        # Only admins add clusters, so only they need the kubeconfig secrets' names.
        "secrets": (
            Secret.objects.filter(organization=actor.organization)
            if actor.has_role(Role.ADMIN)
            else Secret.objects.none()
        ),
        "error": error,
        "form": form,
    }
    return render(request, "deployments/clusters.html", context, status=422 if error else 200)


@require_POST
@console_view
def cluster_delete(request: HttpRequest, cluster_id: str) -> HttpResponse:
    try:
        services.delete_cluster(actor_of(request), cluster_id)
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("cluster-list")


def _usage_chart(records: QuerySet[UsageRecord]) -> Chart:
    hourly = (
        records.annotate(hour=TruncHour("minute"))
        .values("hour")
        .order_by("hour")
        .annotate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    )
    rows = list(hourly)
    return Chart(
        "Tokens per hour",
        "tokens",
        [r["hour"] for r in rows],
        [
            Series("prompt", [float(r["prompt"]) for r in rows]),
            Series("completion", [float(r["completion"]) for r in rows]),
        ],
    )


@console_view
def usage(request: HttpRequest) -> HttpResponse:
    actor = actor_of(request)
    window = request.GET.get("window", "24h")
    window = window if window in WINDOWS else "24h"
    records = UsageRecord.objects.filter(
        organization=actor.organization, minute__gte=timezone.now() - WINDOWS[window]
    )
    table = (
        records.values("api_key__name", "api_key__prefix", "deployment_slug")
        .annotate(
            requests=Sum("requests"),
            prompt=Sum("prompt_tokens"),
            cached=Sum("cached_tokens"),
            completion=Sum("completion_tokens"),
        )
        .order_by("-completion")
    )
    context = {
        "rows": list(table[:200]),
        "chart": _usage_chart(records),
        "window": window,
        "windows": list(WINDOWS),
    }
    return render(request, "deployments/usage.html", context)
