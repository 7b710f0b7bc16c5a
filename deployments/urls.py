"""Console URLs of the deployments domain (endpoints, experiments, clusters, usage, API keys,
quotas)."""

from __future__ import annotations

from django.urls import URLPattern, path

from deployments.clusters import views as fleet
from deployments.costs import views as costs
from deployments.endpoints.views import (
    adapters,
    endpoints,
    history,
    onboarding,
    optimize,
    playground,
    wizard,
)
from deployments.experiments.views import benchmarks, canary, experiments
from deployments.fleet import views as fleet_views
from deployments.quantization import views as quantization
from deployments.quotas import views as quotas
from deployments.traffic.views import keys, usage

urlpatterns: list[URLPattern] = [
    path("endpoints/", endpoints.endpoint_list, name="endpoint-list"),
    path("endpoints/new/", wizard.endpoint_create, name="endpoint-create"),
    path("endpoints/validate/", wizard.validate_settings, name="endpoint-validate"),
    path("endpoints/<slug:slug>/", endpoints.endpoint_detail, name="endpoint-detail"),
    path("endpoints/<slug:slug>/status/", endpoints.status_card, name="endpoint-status"),
    path("endpoints/<slug:slug>/first-call/", onboarding.first_call, name="endpoint-first-call"),
    path("endpoints/<slug:slug>/scale/", endpoints.endpoint_scale, name="endpoint-scale"),
    path(
        "endpoints/<slug:slug>/placement/",
        fleet_views.endpoint_placement,
        name="endpoint-placement",
    ),
    path("endpoints/<slug:slug>/adapters/", adapters.adapter_add, name="endpoint-adapter-add"),
    path(
        "endpoints/<slug:slug>/adapters/<str:name>/remove/",
        adapters.adapter_remove,
        name="endpoint-adapter-remove",
    ),
    path("endpoints/<slug:slug>/stop/", endpoints.endpoint_stop, name="endpoint-stop"),
    path("endpoints/<slug:slug>/start/", endpoints.endpoint_start, name="endpoint-start"),
    path("endpoints/<slug:slug>/delete/", endpoints.endpoint_delete, name="endpoint-delete"),
    path("endpoints/<slug:slug>/settings/", wizard.endpoint_edit, name="endpoint-edit"),
    path("endpoints/<slug:slug>/revisions/", history.revision_list, name="endpoint-revisions"),
    path("endpoints/<slug:slug>/revisions/diff/", history.revision_diff, name="endpoint-diff"),
    path(
        "endpoints/<slug:slug>/revisions/<int:number>/rollback/",
        history.revision_rollback,
        name="endpoint-rollback",
    ),
    path("endpoints/<slug:slug>/canary/", canary.canary_start, name="canary-start"),
    path("endpoints/<slug:slug>/canary/promote/", canary.canary_promote, name="canary-promote"),
    path("endpoints/<slug:slug>/canary/abort/", canary.canary_abort, name="canary-abort"),
    path("endpoints/<slug:slug>/benchmarks/", benchmarks.benchmark_list, name="benchmark-list"),
    path(
        "endpoints/<slug:slug>/experiments/", experiments.experiments, name="endpoint-experiments"
    ),
    path(
        "endpoints/<slug:slug>/revisions/<int:number>/gate/",
        experiments.gate_start,
        name="gate-start",
    ),
    path(
        "endpoints/<slug:slug>/revisions/<int:number>/gate/override/",
        experiments.gate_override,
        name="gate-override",
    ),
    path(
        "endpoints/<slug:slug>/benchmarks/compare/",
        benchmarks.benchmark_compare,
        name="benchmark-compare",
    ),
    path(
        "endpoints/<slug:slug>/benchmarks/<uuid:benchmark_id>/",
        benchmarks.benchmark_detail,
        name="benchmark-detail",
    ),
    path("endpoints/<slug:slug>/metrics/", history.endpoint_metrics, name="endpoint-metrics"),
    path("endpoints/<slug:slug>/events/", history.endpoint_events, name="endpoint-events"),
    path("endpoints/<slug:slug>/logs/", history.endpoint_logs, name="endpoint-logs"),
    path(
        "endpoints/<slug:slug>/logs/download/",
        history.endpoint_logs_download,
        name="endpoint-logs-download",
    ),
    path("endpoints/<slug:slug>/playground/key/", playground.playground_key, name="playground-key"),
    path(
        "endpoints/<slug:slug>/playground/chat/", playground.playground_chat, name="playground-chat"
    ),
    path("clusters/", fleet.cluster_list, name="cluster-list"),
    path("fleet/", fleet_views.fleet_page, name="fleet"),
    path("clusters/<uuid:cluster_id>/delete/", fleet.cluster_delete, name="cluster-delete"),
    path("clusters/<uuid:cluster_id>/drain/", fleet_views.cluster_drain, name="cluster-drain"),
    path(
        "clusters/<uuid:cluster_id>/undrain/",
        fleet_views.cluster_undrain,
        name="cluster-undrain",
    ),
    path("clusters/<uuid:cluster_id>/settings/", fleet.cluster_settings, name="cluster-settings"),
    path("usage/", usage.usage, name="usage"),
    path("costs/", costs.costs, name="costs"),
    path("quantization/", quantization.run_list, name="quantization"),
    path("quantization/models/", quantization.artifact_list, name="quantized-models"),
    path("quantization/calibration/", quantization.calibration_upload, name="calibration-upload"),
    path("quantization/<uuid:run_id>/", quantization.run_detail, name="quantization-run"),
    path("quantization/<uuid:run_id>/deploy/", quantization.run_deploy, name="quantization-deploy"),
    path("quantization/<uuid:run_id>/cancel/", quantization.run_cancel, name="quantization-cancel"),
    path("optimize/", optimize.optimize_page, name="optimize"),
    path("optimize/apply/", optimize.optimize_apply, name="optimize-apply"),
    # The wizard's "Recommend settings" (under optimize/, so no endpoint slug is reserved for it).
    path("optimize/wizard/", wizard.wizard_recommend, name="endpoint-recommend"),
    path("quotas/", quotas.quota_admin, name="quota-admin"),
    path("keys/", keys.key_list, name="key-list"),
    path("keys/endpoints/", keys.key_endpoint_choices, name="key-endpoint-choices"),
    path("keys/<uuid:key_id>/limits/", keys.key_limits, name="key-limits"),
    path("keys/<uuid:key_id>/revoke/", keys.key_revoke, name="key-revoke"),
]
