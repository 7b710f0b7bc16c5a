"""The manifests that run Plinth itself (k8s/, the Helm chart charts/plinth as `helm template`
renders it with scripts/render_k8s.py's fixed values) are valid Kubernetes, and the worker's
rights are limited to the namespaces it manages. That k8s/ is exactly the chart's rendering, and
that other values render valid objects too, is checked with the pinned helm in
tests/kube_real/test_chart_on_real_cluster.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

K8S = Path(__file__).resolve().parents[2] / "k8s"
VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0"]
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}


def build(folder: str) -> list[dict[str, Any]]:
    """What ``kubectl apply -k`` would send: resources with the namespace and labels applied."""
    root = K8S / folder
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())
    objects: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        objects += [d for d in yaml.safe_load_all((root / resource).read_text()) if d]
    labels = {k: v for entry in kustomization.get("labels", []) for k, v in entry["pairs"].items()}
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = kustomization.get("namespace", meta.get("namespace"))
        meta["labels"] = {**meta.get("labels", {}), **labels}
    return objects


ALL = [("base", o) for o in build("base")] + [
    ("managed-namespace", o) for o in build("managed-namespace")
]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_object_validates_strictly(version: str) -> None:
    for _, obj in ALL:
        kubernetes_validate.validate(obj, version, strict=True)
    example = yaml.safe_load((K8S / "base" / "secret.example.yaml").read_text())
    kubernetes_validate.validate(example, version, strict=True)


def test_web_worker_beat_gateway_and_migrations_are_all_there() -> None:
    names = {(o["kind"], o["metadata"]["name"]) for _, o in ALL}
    for name in ("plinth-web", "plinth-worker", "plinth-beat", "plinth-gateway"):
        assert ("Deployment", name) in names
    assert ("Job", "plinth-migrate") in names
    beat = next(o for _, o in ALL if o["metadata"]["name"] == "plinth-beat")
    assert beat["spec"]["replicas"] == 1


def test_the_worker_has_namespaced_rights_only() -> None:
    kinds = {o["kind"] for _, o in ALL}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    role = next(o for _, o in ALL if o["kind"] == "Role")
    assert role["metadata"]["namespace"] == "plinth-endpoints"
    binding = next(o for _, o in ALL if o["kind"] == "RoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "plinth-worker", "namespace": "plinth-system"}
    ]
    verbs = {v for rule in role["rules"] for v in rule["verbs"]}
    assert "escalate" not in verbs and "bind" not in verbs and "*" not in verbs


def test_the_worker_may_watch_every_kind_its_caches_watch() -> None:
    from deployments.drivers.kube.client import KubeClient
    from deployments.drivers.kube.informer import ClusterCache

    role = next(o for _, o in ALL if o["kind"] == "Role")
    watchable = {
        (group, resource)
        for rule in role["rules"]
        if "watch" in rule["verbs"] and "list" in rule["verbs"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    cache = ClusterCache(KubeClient.for_host("http://127.0.0.1:1"), "plinth-endpoints")
    for informer in cache.informers.values():
        if not informer.kind.namespaced:
            continue  # nodes: the optional gpu-inventory rights
        group = informer.kind.api_version.rpartition("/")[0]
        assert (group, informer.kind.plural) in watchable, informer.kind.plural
    cache.client.close()


def test_selectors_match_pod_labels() -> None:
    for _, obj in ALL:
        if obj["kind"] == "Deployment":
            selector = obj["spec"]["selector"]["matchLabels"]
            assert selector.items() <= obj["spec"]["template"]["metadata"]["labels"].items()
        if obj["kind"] == "Service":
            pods = [o for _, o in ALL if o["kind"] == "Deployment"]
            assert any(
                obj["spec"]["selector"].items()
                <= p["spec"]["template"]["metadata"]["labels"].items()
                for p in pods
            )


def test_the_optional_gpu_inventory_rights_only_read_nodes_and_pods() -> None:
    objects = build("gpu-inventory")
    for obj in objects:
        for version in VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
    role = next(o for o in objects if o["kind"] == "ClusterRole")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},  # a cache
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    binding = next(o for o in objects if o["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "plinth-worker", "namespace": "plinth-system"}
    ]
