"""What a cluster says of a spec before it is deployed there: errors for the fields its operator
keeps (``ClusterSettings.allows``), warnings from its last observed GPU nodes
(``Cluster.gpu_inventory``). Pure: given the settings and inventory as saved."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from deployments.cluster_settings import (
    TENANT_OVERRIDES,
    ClusterSettings,
    HostPathCache,
    SettingsInvalid,
    parse_settings,
)
from runtime.catalog import get_gpu
from runtime.issues import Issue, warning
from runtime.spec import RuntimeSpec
from runtime.topology import engine_groups


def tenant_override_issues(settings: ClusterSettings, spec: RuntimeSpec) -> list[Issue]:
    """Errors for each field of ``spec`` that sets what the cluster's operator keeps."""
    runtime = spec.runtime
    set_by_spec = {
        "engine_image": runtime.image is not None,
        "router_image": runtime.router_image is not None,
        "env": bool(runtime.env),
        "extra_flags": bool(runtime.extra_flags),
    }
    return [
        Issue(
            "error",
            TENANT_OVERRIDES[name],
            "not_allowed_on_cluster",
            "this cluster's operator does not let endpoints set this",
            "remove it, or ask an admin to allow it in the cluster's settings",
        )
        for name, is_set in set_by_spec.items()
        if is_set and not settings.allows(name)
    ]


def cache_issues(settings: ClusterSettings, spec: RuntimeSpec) -> list[Issue]:
    """Pre-staging keeps weights in each node's own cache: a warning where the cluster has none
    (a claim every node shares has them once already; without a cache there is nowhere)."""
    if not spec.autoscaling.prestage_weights or isinstance(settings.model_cache, HostPathCache):
        return []
    return [
        warning(
            "autoscaling.prestage_weights",
            "prestage_needs_node_cache",
            "this cluster's model cache is not per node, so nothing is pre-staged",
            "leave it off here, or ask an admin for a hostPath model cache",
        )
    ]


def inventory_issues(
    inventory: Mapping[str, Any] | None, spec: RuntimeSpec, replicas: int
) -> list[Issue]:
    """Warnings when the cluster's last observed nodes cannot run ``spec`` at ``replicas``: no
    node of its GPU type, none big enough for one replica's share, or too few free GPUs.

    Nothing when the cluster was never observed (or the last look failed): no news is not bad.
    """
    if not inventory or inventory.get("error") or "nodes" not in inventory:
        return []
    gpu = get_gpu(spec.hardware.gpu).id
    nodes = [n for n in inventory["nodes"] if n.get("gpu") == gpu and n.get("schedulable", True)]
    if not nodes:
        return [
            warning(
                "hardware.gpu",
                "no_gpu_nodes",
                f"the cluster has no schedulable node with {gpu} GPUs; replicas will wait "
                "unscheduled",
                "choose a GPU type the cluster has, another cluster, or add nodes",
            )
        ]
    issues: list[Issue] = []
    free = [max(0, int(n.get("allocatable", 0)) - int(n.get("allocated", 0))) for n in nodes]
    needed = 0
    for group in engine_groups(spec):
        count = replicas if group.role == "engine" else group.replicas_min
        needed += group.gpus * count
        per_node = group.gpus_per_node
        largest = max(int(n.get("allocatable", 0)) for n in nodes)
        if per_node > largest:
            issues.append(
                warning(
                    "hardware.gpus_per_replica",
                    "gpu_nodes_too_small",
                    f"each node of a {group.role} replica needs {per_node} {gpu} GPUs; the "
                    f"cluster's largest such node has {largest}",
                    "use more nodes per replica or fewer GPUs per replica",
                )
            )
    total_free = sum(free)
    if needed > total_free:
        issues.append(
            warning(
                "hardware.gpu",
                "too_few_free_gpus",
                f"{needed} {gpu} GPUs needed, {total_free} free on the cluster when last "
                "observed; some replicas will wait until GPUs free up",
                f"free {math.ceil(needed - total_free)} GPUs, or ask for fewer replicas",
            )
        )
    return issues


def cluster_issues(
    operator_settings: Mapping[str, Any] | None,
    inventory: Mapping[str, Any] | None,
    spec: RuntimeSpec,
    replicas: int,
) -> list[Issue]:
    """What a Kubernetes cluster says of ``spec`` before it is deployed there: errors for
    settings its operator keeps, warnings from its observed GPU nodes. Settings that no longer
    parse refuse nothing here (reconcile names them to the admin)."""
    try:
        settings = parse_settings(operator_settings)
    except SettingsInvalid:
        return inventory_issues(inventory, spec, replicas)
    return [
        *tenant_override_issues(settings, spec),
        *cache_issues(settings, spec),
        *inventory_issues(inventory, spec, replicas),
    ]
