"""Plinth's own manifests close their namespaces to ingress, and what the per-endpoint fences let
in (the gateway and the worker) is exactly what k8s/base runs, where the worker may manage them."""

from __future__ import annotations

from typing import Any

from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render import KubeOptions, render_revision
from tests.charts.test_k8s_manifests import ALL
from tests.drivers.reference_specs import REF, load_spec, revision_plan


def _objects(folder: str, kind: str) -> list[dict[str, Any]]:
    return [o for where, o in ALL if where == folder and o["kind"] == kind]


def _pod_labels(name: str) -> dict[str, str]:
    [deployment] = [o for o in _objects("base", "Deployment") if o["metadata"]["name"] == name]
    return dict(deployment["spec"]["template"]["metadata"]["labels"])


def test_both_namespaces_deny_ingress_by_default() -> None:
    for folder in ("base", "managed-namespace"):
        deny = [
            o
            for o in _objects(folder, "NetworkPolicy")
            if o["spec"]["podSelector"] == {} and "ingress" not in o["spec"]
        ]
        assert [o["spec"]["policyTypes"] for o in deny] == [["Ingress"]], folder


def test_only_web_and_gateway_take_traffic_and_gateway_metrics_only_from_monitoring() -> None:
    policies = _objects("base", "NetworkPolicy")
    allowed = {o["metadata"]["name"]: o for o in policies if "ingress" in o["spec"]}
    assert set(allowed) == {"plinth-web", "plinth-gateway"}
    http, metrics = allowed["plinth-gateway"]["spec"]["ingress"]
    assert "from" not in http and http["ports"] == [{"port": "http", "protocol": "TCP"}]
    [peer] = metrics["from"]
    assert peer == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }
    selector = allowed["plinth-gateway"]["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= _pod_labels("plinth-gateway").items()


def test_endpoint_fences_let_in_the_gateway_and_worker_pods_k8s_base_runs() -> None:
    objs = render_revision(REF, revision_plan(load_spec("llama-3.1-8b-h100")), KubeOptions())
    [namespace] = [o for where, o in ALL if where == "base" and o["kind"] == "Namespace"]
    peers = [
        peer
        for o in objs
        if o["kind"] == "NetworkPolicy"
        for rule in o["spec"]["ingress"]
        for peer in rule.get("from", [])
        if "namespaceSelector" in peer
    ]
    assert peers
    for peer in peers:
        ns = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        assert ns == namespace["metadata"]["name"]
        component = peer["podSelector"]["matchLabels"][L.COMPONENT]
        assert (
            peer["podSelector"]["matchLabels"].items() <= _pod_labels(f"plinth-{component}").items()
        )


def test_the_worker_may_manage_network_policies_in_its_namespaces() -> None:
    [role] = _objects("managed-namespace", "Role")
    rules = [r for r in role["rules"] if "networkpolicies" in r["resources"]]
    assert rules and rules[0]["apiGroups"] == ["networking.k8s.io"]
    assert {"get", "list", "patch", "delete"} <= set(rules[0]["verbs"])
