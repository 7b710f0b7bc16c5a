"""Where pods may go, and what GPUs a cluster has: pure functions over Nodes and Pods as dicts.

``eligible_nodes`` applies the scheduler's filters that Plinth's manifests decide (node
selector, required node affinity, taints against tolerations, cordons, GPUs a node can hold) to
a rendered pod spec, so tests check placement on labelled nodes without a scheduler.
``gpu_inventory`` summarises a cluster's nodes (GPU type by the cluster's GPU map, allocatable
and allocated GPUs) as the worker stores it on ``Cluster.gpu_inventory``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from deployments.cluster_settings import ClusterSettings, Toleration
from runtime.catalog import GPU_PRODUCT_LABEL

# Taint effects that keep a pod off a node (PreferNoSchedule only discourages).
_BLOCKING = frozenset({"NoSchedule", "NoExecute"})
# Pods in these phases hold no GPU any more.
_DONE = frozenset({"Succeeded", "Failed"})


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _expression_matches(labels: Mapping[str, str], expression: Mapping[str, Any]) -> bool:
    key, operator = expression.get("key", ""), expression.get("operator")
    values = list(expression.get("values") or [])
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in {"Gt", "Lt"} and present and values:
        try:
            node_value, bound = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return node_value > bound if operator == "Gt" else node_value < bound
    return False


def _affinity_matches(labels: Mapping[str, str], pod_spec: Mapping[str, Any]) -> bool:
    """Required node affinity: any term matches when all of its expressions do."""
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    return any(
        all(_expression_matches(labels, e) for e in term.get("matchExpressions") or [])
        for term in terms
    )


def _tolerated(taints: Iterable[Mapping[str, Any]], tolerations: list[Toleration]) -> bool:
    return all(
        any(t.tolerates(taint) for t in tolerations)
        for taint in taints
        if taint.get("effect") in _BLOCKING
    )


def _requested(pod_spec: Mapping[str, Any], resource: str) -> int:
    """What the scheduler reserves: the containers' sum, or the largest init container's."""

    def count(containers: Iterable[Mapping[str, Any]]) -> list[int]:
        return [
            int(((c.get("resources") or {}).get("requests") or {}).get(resource, 0) or 0)
            for c in containers
        ]

    init = count(pod_spec.get("initContainers") or [])
    return max(sum(count(pod_spec.get("containers") or [])), max(init, default=0))


def _allocatable(node: Mapping[str, Any], resource: str) -> int:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource, 0)
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def eligible_nodes(
    pod_spec: Mapping[str, Any],
    nodes: Iterable[Mapping[str, Any]],
    *,
    gpu_resource: str = "nvidia.com/gpu",
) -> list[str]:
    """Names of the ``nodes`` a pod with ``pod_spec`` may be scheduled on, ignoring what other
    pods already use (see ``gpu_inventory`` for that)."""
    selector = pod_spec.get("nodeSelector") or {}
    tolerations = [Toleration.model_validate(_snake(t)) for t in pod_spec.get("tolerations") or []]
    wanted = _requested(pod_spec, gpu_resource)
    eligible = []
    for node in nodes:
        labels = _labels(node)
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        if not _affinity_matches(labels, pod_spec):
            continue
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        if not _tolerated((node.get("spec") or {}).get("taints") or [], tolerations):
            continue
        if wanted and _allocatable(node, gpu_resource) < wanted:
            continue
        eligible.append((node.get("metadata") or {}).get("name", ""))
    return eligible


def _snake(toleration: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in toleration.items() if k != "tolerationSeconds"}
    if "tolerationSeconds" in toleration:
        out["toleration_seconds"] = toleration["tolerationSeconds"]
    return out


def gpu_inventory(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    cluster: ClusterSettings,
) -> dict[str, Any]:
    """Per GPU node: its catalogue GPU (by the cluster's GPU map; "" when none matches), the
    product label, GPUs allocatable and allocated (requests of pods bound to it that have not
    finished), and whether new pods may land there. Nodes without GPUs are left out."""
    resource = cluster.gpu_resource
    allocated: dict[str, int] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in _DONE:
            allocated[node] = allocated.get(node, 0) + _requested(spec, resource)
    rows = []
    for node in nodes:
        allocatable = _allocatable(node, resource)
        if not allocatable:
            continue
        labels = _labels(node)
        name = (node.get("metadata") or {}).get("name", "")
        spec = node.get("spec") or {}
        rows.append(
            {
                "name": name,
                "gpu": cluster.gpu_of_node(labels),
                "product": labels.get(GPU_PRODUCT_LABEL, ""),
                "allocatable": allocatable,
                "allocated": min(allocated.get(name, 0), allocatable),
                "schedulable": not spec.get("unschedulable"),
            }
        )
    rows.sort(key=lambda r: (r["gpu"], r["name"]))
    return {"nodes": rows, "gpus": summarise(rows)}


def gpu_node_readiness(
    nodes: Iterable[Mapping[str, Any]], cluster: ClusterSettings
) -> tuple[int, int]:
    """(GPU nodes, those whose kubelet reports Ready): nodes with the cluster's GPU resource."""
    gpu_nodes = [n for n in nodes if _allocatable(n, cluster.gpu_resource)]
    conditions = [((n.get("status") or {}).get("conditions") or []) for n in gpu_nodes]
    ready = sum(
        1
        for found in conditions
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in found)
    )
    return len(gpu_nodes), ready


def summarise(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per catalogue GPU: schedulable nodes, GPUs they hold and GPUs free on them."""
    totals: dict[str, dict[str, int]] = {}
    for row in rows:
        if not row["gpu"] or not row["schedulable"]:
            continue
        entry = totals.setdefault(row["gpu"], {"nodes": 0, "gpus": 0, "free": 0})
        entry["nodes"] += 1
        entry["gpus"] += row["allocatable"]
        entry["free"] += row["allocatable"] - row["allocated"]
    return totals
