"""Console pages of clusters (where endpoints run): the list, their settings, deleting one."""

from __future__ import annotations

from typing import Any

import yaml
from django.contrib import messages
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from controlplane.access import NotFound, require_role
from controlplane.guard import actor_of, console_view
from controlplane.models import Role, Secret
from controlplane.services import ServiceError
from deployments.clusters import queries as cluster_queries
from deployments.clusters import services


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
            error = {"field": exc.field or "", "message": exc.detail}
        else:
            messages.success(request, f"Cluster {form['name']} added.")
            return redirect("cluster-list")
    # Every endpoint placed on the cluster, its home's or not (``deployments.fleet``).
    clusters = cluster_queries.clusters_for(actor).annotate(
        endpoints=Count("placements__deployment", distinct=True)
    )
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


SETTINGS_HELP = "YAML: only what differs from the defaults is needed; the GPU map merges."


@require_http_methods(["GET", "POST"])
@console_view
def cluster_settings(request: HttpRequest, cluster_id: str) -> HttpResponse:
    """An admin's view and edit of a Kubernetes cluster's namespace and operator settings
    (YAML, checked by the same service as the API's PATCH)."""
    actor = actor_of(request)
    require_role(actor, Role.ADMIN)
    cluster = cluster_queries.get_cluster(actor, cluster_id)
    if cluster.kind != "kubernetes":
        raise NotFound("cluster not found")
    error: dict[str, str] = {}
    namespace = cluster.namespace
    stored = cluster.operator_settings
    text = yaml.safe_dump(stored, sort_keys=False, allow_unicode=True) if stored else ""
    if request.method == "POST":
        namespace = request.POST.get("namespace", "").strip()
        text = request.POST.get("settings", "")
        try:
            settings = _settings_yaml(text)
            services.update_cluster(actor, cluster.pk, namespace=namespace, settings=settings)
        except ServiceError as exc:
            error = {"field": exc.field or "", "message": exc.message}
        else:
            messages.success(request, f"Settings of {cluster.name} saved.")
            return redirect("cluster-settings", cluster_id=cluster.pk)
    context = {
        "cluster": cluster,
        "namespace": namespace,
        "settings_text": text,
        "help": SETTINGS_HELP,
        "error": error,
    }
    return render(
        request, "deployments/cluster_settings.html", context, status=422 if error else 200
    )


def _settings_yaml(text: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ServiceError(f"the settings are not valid YAML{where}", field="settings") from None
    if not isinstance(data, dict):
        raise ServiceError("the settings must be a mapping of setting: value", field="settings")
    return data


@require_POST
@console_view
def cluster_delete(request: HttpRequest, cluster_id: str) -> HttpResponse:
    try:
        services.delete_cluster(actor_of(request), cluster_id)
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("cluster-list")
