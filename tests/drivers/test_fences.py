"""Fences around an endpoint on Kubernetes: NetworkPolicies that let only its router (and its own
pods) reach the engines and only the gateway and the worker reach the router; the API key from a
Secret, never written into a manifest; pods with a read-only root filesystem, the router
non-root. Every variant is valid Kubernetes 1.29-1.34 (strict)."""

from __future__ import annotations

import json
from typing import Any

import kubernetes_validate
import pytest

from deployments.cluster_settings import ClusterSettings, SettingsInvalid, parse_settings
from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render import API_KEY_ENV, KubeOptions, render_revision
from runtime.launch import ENGINE_PORT, ROUTER_METRICS_PORT, ROUTER_PORT
from runtime.spec import MODEL_CACHE_PATH
from tests.drivers.reference_specs import ENGINE_KEY, REF, golden_names, load_spec, revision_plan
from tests.drivers.test_manifests import K8S_VERSIONS

PLATFORM = {"kubernetes.io/metadata.name": "plinth-system"}


def rendered(
    name: str = "llama-3.1-8b-h100", ref: base.DeploymentRef = REF, **options: Any
) -> list[dict[str, Any]]:
    cluster = ClusterSettings(**options)  # the fences are the cluster's settings
    return render_revision(ref, revision_plan(load_spec(name)), KubeOptions(cluster=cluster))


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def pod_specs(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(object name, pod spec) of every pod template: Deployments, LWS leaders and workers."""
    found = []
    for obj in objs:
        if obj["kind"] == "Deployment":
            found.append((obj["metadata"]["name"], obj["spec"]["template"]))
        if obj["kind"] == "LeaderWorkerSet":
            template = obj["spec"]["leaderWorkerTemplate"]
            found.append((obj["metadata"]["name"], template["leaderTemplate"]))
            found.append((obj["metadata"]["name"] + "/worker", template["workerTemplate"]))
    return found


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_variant_validates_strictly(version: str) -> None:
    variants: list[dict[str, Any]] = [
        {},
        {"monitoring_namespace": "monitoring", "engine_run_as_user": 1000},
        {"read_only_root": False, "platform_namespace": "plinth"},
    ]
    for name in golden_names():
        for options in variants:
            for obj in rendered(name, **options):
                if obj["kind"] != "LeaderWorkerSet":
                    kubernetes_validate.validate(obj, version, strict=True)


def test_engines_take_traffic_from_their_own_endpoint_and_the_workers_probe_only() -> None:
    objs = rendered("llama-3.1-70b-pd-h100")
    policy = one(objs, "NetworkPolicy", "chat-fence-engines")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    # Selects every engine pod of this endpoint (engine, prefill, decode), not its router.
    selector = spec["podSelector"]
    assert selector["matchLabels"] == {L.DEPLOYMENT: REF.id}
    assert selector["matchExpressions"] == [
        {"key": L.ROLE, "operator": "NotIn", "values": ["router"]}
    ]
    own, probe = spec["ingress"]
    # Its router and its other pools/ranks (KV transfer, NCCL), on any port.
    assert own == {"from": [{"podSelector": {"matchLabels": {L.DEPLOYMENT: REF.id}}}]}
    assert probe == {
        "from": [
            {
                "namespaceSelector": {"matchLabels": PLATFORM},
                "podSelector": {"matchLabels": L.platform_labels("worker")},
            }
        ],
        "ports": [{"port": ENGINE_PORT, "protocol": "TCP"}],
    }


def test_the_router_takes_traffic_from_the_gateway_and_the_worker_only() -> None:
    policy = one(rendered(), "NetworkPolicy", "chat-fence-router")
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": L.role_selector(REF.id, "router")}
    [rule] = spec["ingress"]
    components = {peer["podSelector"]["matchLabels"][L.COMPONENT] for peer in rule["from"]}
    assert components == {"gateway", "worker"}
    assert all(peer["namespaceSelector"]["matchLabels"] == PLATFORM for peer in rule["from"])
    assert {p["port"] for p in rule["ports"]} == {ROUTER_PORT, ROUTER_METRICS_PORT}


def test_a_monitoring_namespace_may_scrape_metrics_and_nothing_else() -> None:
    objs = rendered(monitoring_namespace="monitoring")
    engines = one(objs, "NetworkPolicy", "chat-fence-engines")["spec"]["ingress"]
    router = one(objs, "NetworkPolicy", "chat-fence-router")["spec"]["ingress"]
    scrape = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    assert {"from": [scrape], "ports": [{"port": ENGINE_PORT, "protocol": "TCP"}]} in engines
    assert {"from": [scrape], "ports": [{"port": ROUTER_METRICS_PORT, "protocol": "TCP"}]} in router
    # Without one, no rule names any namespace but Plinth's own.
    plain = one(rendered(), "NetworkPolicy", "chat-fence-router")["spec"]["ingress"]
    assert "monitoring" not in json.dumps(plain)


@pytest.mark.parametrize("name", golden_names())
def test_engines_and_router_demand_the_key_from_the_secret_which_alone_holds_it(
    name: str,
) -> None:
    objs = rendered(name)
    secret = one(objs, "Secret", "chat-api-key")
    assert secret["stringData"] == {API_KEY_ENV: ENGINE_KEY}
    assert [o for o in objs if ENGINE_KEY in json.dumps(o)] == [secret]
    for owner, template in pod_specs(objs):
        [container] = template["spec"]["containers"]
        args = container["args"]
        # Escaped from the kubelet: the process itself reads the variable (runtime.secret_flags).
        assert args[args.index("--api-key") + 1] == f"$$({API_KEY_ENV})", owner
        assert container["command"][:2] == ["python3", "-c"], owner
        env = {e["name"]: e for e in container["env"]}
        key_ref = env[API_KEY_ENV]["valueFrom"]["secretKeyRef"]
        assert key_ref == {"name": "chat-api-key", "key": API_KEY_ENV}, owner
        assert template["metadata"]["annotations"][L.API_KEY_DIGEST], owner


def test_a_new_key_rolls_the_pods_and_no_key_renders_open_engines() -> None:
    def templates(ref: base.DeploymentRef) -> dict[str, Any]:
        return dict(pod_specs(rendered(ref=ref)))

    rotated = base.DeploymentRef(REF.id, REF.slug, REF.namespace, api_key="pek_" + "77" * 32)
    assert templates(rotated)["chat-engine"] != templates(REF)["chat-engine"]
    open_ref = base.DeploymentRef(REF.id, REF.slug, REF.namespace)
    objs = rendered(ref=open_ref)
    assert not [o for o in objs if o["metadata"]["name"] == "chat-api-key"]
    assert "--api-key" not in json.dumps(objs)


def test_a_spec_value_cannot_reference_the_key() -> None:
    base_spec = load_spec("llama-3.1-8b-h100")
    model = base_spec.model.model_copy(update={"served_name": f"$({API_KEY_ENV})"})
    spec = base_spec.model_copy(update={"model": model})
    objs = render_revision(REF, revision_plan(spec), KubeOptions())
    args = one(objs, "Deployment", "chat-engine")["spec"]["template"]["spec"]["containers"][0]
    served = args["args"][args["args"].index("--served-model-name") + 1]
    assert served == f"$$({API_KEY_ENV})"  # escaped: Kubernetes passes it on literally


@pytest.mark.parametrize("name", golden_names())
def test_root_filesystems_are_read_only_but_cache_tmp_and_shm(name: str) -> None:
    for owner, template in pod_specs(rendered(name)):
        pod = template["spec"]
        [container] = pod["containers"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True, owner
        assert security["allowPrivilegeEscalation"] is False, owner
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "/tmp" in mounts and "emptyDir" in volumes["tmp"], owner
        for init in pod.get("initContainers", []):  # the weights download, or the wait for it
            assert init["securityContext"]["readOnlyRootFilesystem"] is True, owner
            assert init["securityContext"]["allowPrivilegeEscalation"] is False, owner
        if container["name"] == "router":
            assert security["runAsNonRoot"] is True and security["runAsUser"] > 0
            assert security["capabilities"] == {"drop": ["ALL"]}
        else:
            assert {"/dev/shm", MODEL_CACHE_PATH} <= mounts, owner
            # The SGLang image runs as root: non-root is the operator's choice.
            assert "runAsNonRoot" not in security
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["HOME"] == "/tmp"  # JIT caches land in the emptyDir


def test_an_operator_can_run_engines_as_non_root() -> None:
    objs = rendered("deepseek-v3-tp16-2x-h200", engine_run_as_user=1000)
    for owner, template in pod_specs(objs):
        [container] = template["spec"]["containers"]
        if container["name"] == "engine":
            # The weights download before it runs as the same user, into the same cache.
            for each in (container, *template["spec"]["initContainers"]):
                assert each["securityContext"]["runAsNonRoot"] is True, owner
                assert each["securityContext"]["runAsUser"] == 1000
            assert template["spec"]["securityContext"] == {"fsGroup": 1000}


def test_fence_settings_are_checked_when_saved() -> None:
    for bad in (
        {"engine_run_as_user": 0},  # root is what runAsNonRoot refuses
        {"engine_run_as_user": -1},
        {"monitoring_namespace": "Monitoring"},
        {"platform_namespace": "a_b"},
        {"read_only_root": "sometimes"},
    ):
        with pytest.raises(SettingsInvalid) as refused:
            parse_settings(bad)
        assert [f for f, _ in refused.value.problems] == list(bad)
    stored = parse_settings({"engine_run_as_user": 1000, "monitoring_namespace": "obs"}).stored()
    assert stored["engine_run_as_user"] == 1000 and stored["read_only_root"] is True
    assert stored["platform_namespace"] == "plinth-system"


def test_an_image_that_writes_to_its_root_can_be_let_through() -> None:
    objs = rendered(read_only_root=False)
    engine = dict(pod_specs(objs))["chat-engine"]["spec"]["containers"][0]
    assert engine["securityContext"]["readOnlyRootFilesystem"] is False
