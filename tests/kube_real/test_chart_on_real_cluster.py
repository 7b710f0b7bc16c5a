"""Plinth's Helm chart (charts/plinth) on the real API server, with the pinned helm.

k8s/ is the chart's rendering (scripts/render_k8s.py) and nothing else; `helm lint` passes; every
rendering validates; `helm install` succeeds with helm's own wait (kwok runs the pods and
completes the migration hook's), `helm upgrade` with a changed value rolls the pods, and
`helm uninstall` leaves nothing. Each of the chart's ServiceAccounts, as installed, may do
exactly what its process calls: the worker its Role (test_worker_rbac_on_real_cluster.py), the
console, beat and gateway nothing at all (none of them calls the Kubernetes API: views and the
gateway never import a driver), and none of them any of the dangerous things below.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from scripts.render_k8s import CHART, K8S, generated_paths, helm_template, rendering
from tests.drivers.reference_specs import REF, load_spec, revision_plan
from tests.kube_real.conftest import LOOPBACK, SETTLE_S, Admin
from tests.kube_real.control_plane import ControlPlane, binaries_dir
from tests.kube_real.test_worker_rbac_on_real_cluster import ALLOWED as WORKER_RIGHTS
from tests.kube_real.test_worker_rbac_on_real_cluster import DENIED as WORKER_DENIED
from tests.kube_real.test_worker_rbac_on_real_cluster import may
from tests.waiting import wait_until

COMPONENTS = ("web", "worker", "beat", "gateway")
# The processes that never call the Kubernetes API (the console is `web`).
NO_API = ("web", "beat", "gateway")
HOME = "{home}"  # the release's namespace
MANAGED = "{managed}"  # a namespace the release manages
# What none of the chart's accounts may do, on top of the worker's own DENIED list.
NONE_MAY = [
    ("get", "", "secrets", HOME),  # not even its own namespace's: the pods read them as env
    ("create", "", "pods/exec", HOME),
    ("create", "", "pods/exec", MANAGED),
    ("patch", "apps", "deployments", HOME),  # nothing rewrites Plinth itself
    ("create", "rbac.authorization.k8s.io", "rolebindings", HOME),
    ("escalate", "rbac.authorization.k8s.io", "clusterroles", None),
    ("impersonate", "", "serviceaccounts", None),
    ("create", "", "serviceaccounts/token", HOME),
    ("delete", "", "nodes", None),
    ("create", "admissionregistration.k8s.io", "validatingwebhookconfigurations", None),
]
# Release-owned kinds that must be gone after `helm uninstall` (path under the namespace).
NAMESPACED = [
    "/api/v1/namespaces/{ns}/serviceaccounts",
    "/api/v1/namespaces/{ns}/configmaps",
    "/api/v1/namespaces/{ns}/services",
    "/apis/apps/v1/namespaces/{ns}/deployments",
    "/apis/batch/v1/namespaces/{ns}/jobs",
    "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
]
PART_OF = "labelSelector=app.kubernetes.io%2Fpart-of%3Dplinth"


def helm() -> Path:
    return binaries_dir() / "helm"


@dataclass
class Helm:
    """The pinned helm as the cluster admin, its config and cache in the run directory."""

    cluster: ControlPlane

    def __call__(self, *args: str) -> str:
        home = self.cluster.path("helm")
        env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }
        command = [str(helm()), "--kubeconfig", str(self.cluster.path("admin.kubeconfig"))]
        done = subprocess.run(
            [*command, *args], capture_output=True, text=True, env=env, check=False
        )
        assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout


@dataclass
class Release:
    name: str
    home: str  # the release's namespace
    managed: list[str]  # the namespaces it manages (made by the chart)


# Pod Security admission's strictest level, enforced on the release's namespace as a careful
# platform team sets it: a pod of the chart's that breaks it is refused by the API server.
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def _namespace(admin: Admin, name: str) -> None:
    admin.call("POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": RESTRICTED}})


def _secrets(admin: Admin, namespace: str) -> None:
    """The Secrets the chart names (values: existingSecret + key), made out of band."""
    for name, keys in {
        "plinth-secrets": ["SECRET_KEY", "PLINTH_ENCRYPTION_KEY", "DATABASE_URL", "REDIS_URL"],
        "plinth-metrics": ["token"],
    }.items():
        body = {"metadata": {"name": name}, "stringData": {k: uuid.uuid4().hex for k in keys}}
        admin.call("POST", f"/api/v1/namespaces/{namespace}/secrets", body)


def _install(tool: Helm, admin: Admin) -> Release:
    tag = uuid.uuid4().hex[:8]
    release = Release(f"plinth-{tag}", f"plinth-{tag}", [f"m-{tag}-a", f"m-{tag}-b"])
    _namespace(admin, release.home)
    _secrets(admin, release.home)
    names = ",".join(release.managed)
    tool(
        "install", release.name, str(CHART), "--namespace", release.home,
        "--set", f"managedNamespaces.names={{{names}}}",
        "--wait", "--timeout", f"{int(SETTLE_S)}s",
    )  # fmt: skip
    return release


def _names(admin: Admin, path: str) -> set[str]:
    items = admin.call("GET", path).get("items") or []
    return {i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp")}


def _leftovers(admin: Admin, release: Release) -> list[str]:
    found = []
    for namespace in [release.home, *release.managed]:
        for path in NAMESPACED:
            query = path.format(ns=namespace) + ("?" + PART_OF if namespace == release.home else "")
            found += [f"{path.format(ns=namespace)}/{n}" for n in _names(admin, query)]
    records = f"/api/v1/namespaces/{release.home}/secrets?labelSelector=owner%3Dhelm"
    found += [f"helm's record {n}" for n in _names(admin, records)]
    for kind in ("clusterroles", "clusterrolebindings"):
        path = f"/apis/rbac.authorization.k8s.io/v1/{kind}?{PART_OF}"
        found += [f"{kind}/{n}" for n in _names(admin, path) if n.endswith(release.home)]
    for namespace in release.managed:
        if admin.get(f"/api/v1/namespaces/{namespace}") is not None:
            found.append(f"namespace {namespace}")
    return found


def _forget(admin: Admin, release: Release) -> None:
    admin.call("DELETE", f"/api/v1/namespaces/{release.home}")


@pytest.fixture(scope="module")
def installed(cluster: ControlPlane, admin: Admin) -> Iterator[Release]:
    """One installation for the tests that only look at it."""
    tool = Helm(cluster)
    release = _install(tool, admin)
    yield release
    tool("uninstall", release.name, "--namespace", release.home, "--wait")
    _forget(admin, release)


# --- the chart itself -----------------------------------------------------------------------


def test_k8s_is_the_charts_rendering() -> None:
    files = rendering(helm())
    on_disk = {str(p.relative_to(K8S)): p.read_text() for p in generated_paths()}
    stale = sorted(set(on_disk) - set(files))
    differ = sorted(p for p, text in files.items() if on_disk.get(p) != text)
    assert not stale and not differ, (
        f"k8s/ is not the chart's rendering (run scripts/render_k8s.py): {differ + stale}"
    )


def test_helm_lint_passes(cluster: ControlPlane) -> None:
    tool = Helm(cluster)
    tool("lint", "--strict", str(CHART))
    tool("lint", "--strict", str(CHART), "--set", "monitoring.monitors=true")


VALUE_SETS = {
    "defaults": [],
    "everything": ["monitoring.monitors=true", "createNamespace=true"],
    "single-sign-on": [
        "config.PLINTH_OIDC_ISSUER=https://idp.example",
        "config.PLINTH_OIDC_CLIENT_ID=plinth",
        "oidcClientSecret.existingSecret=plinth-oidc",
    ],
    "lean": [
        "gpuInventory=false",
        "podDisruptionBudgets=false",
        "monitoring.dashboards=false",
        "managedNamespaces.create=false",
        "managedNamespaces.names={a,b,c}",
    ],
}


@pytest.mark.parametrize("values", VALUE_SETS, ids=str)
def test_every_rendering_validates_strictly(values: str) -> None:
    objects = [d for d in yaml.safe_load_all(helm_template(helm(), VALUE_SETS[values])) if d]
    assert objects
    for obj in objects:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the operator's kinds: tests/charts/test_monitoring.py's schema
        kubernetes_validate.validate(obj, "1.34.0", strict=True)


def test_no_default_value_holds_a_secret() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    references = [values["secretKey"], values["encryptionKey"], values["metricsToken"]]
    references += [values["oidcClientSecret"]]
    references += [values["postgresql"]["url"], values["redis"]["url"]]
    for reference in references:
        assert set(reference) == {"existingSecret", "key"}


# A bad value, and the words helm's refusal must hold (values.schema.json).
BAD_VALUES = {
    "secretKey.value=hunter2": "additional properties 'value' not allowed",  # a secret inline
    "config.REDIS_URL=redis://x": "invalid propertyName 'REDIS_URL'",  # into a ConfigMap
    "config.PLINTH_OIDC_CLIENT_SECRET=x": "invalid propertyName 'PLINTH_OIDC_CLIENT_SECRET'",
    "monitoring.monitors=maybe": "/monitoring/monitors",
    "managedNamespaces.names={Team_A}": "/managedNamespaces/names/0",
    "web.replicas=-1": "/web/replicas",
    "benchmarks.aiperfImage=Not An Image": "/benchmarks/aiperfImage",
}


@pytest.mark.parametrize("value", BAD_VALUES)
def test_a_bad_value_is_refused_naming_it(value: str) -> None:
    with pytest.raises(subprocess.CalledProcessError) as refused:
        helm_template(helm(), [value])
    assert BAD_VALUES[value] in refused.value.stderr


def test_the_aiperf_image_value_reaches_the_platforms_setting() -> None:
    """``benchmarks.aiperfImage`` becomes ``PLINTH_BENCHMARK_IMAGE`` (the platform's default
    AIPerf image for benchmark Jobs); unset, the setting is absent and Plinth's image is used."""

    def config(*extra: str) -> dict[str, str]:
        text = helm_template(helm(), list(extra))
        [found] = [
            d
            for d in yaml.safe_load_all(text)
            if d and d["kind"] == "ConfigMap" and d["metadata"]["name"] == "plinth-config"
        ]
        return dict(found["data"])

    mirror = "registry.internal:5000/mirror/aiperf:0.13.0"
    assert config(f"benchmarks.aiperfImage={mirror}")["PLINTH_BENCHMARK_IMAGE"] == mirror
    assert "PLINTH_BENCHMARK_IMAGE" not in config()


def test_the_monitors_follow_the_clusters_api_unless_told() -> None:
    def kinds(*extra: str) -> set[str]:
        text = helm_template(helm(), [], *extra)
        return {d["kind"] for d in yaml.safe_load_all(text) if d}

    monitors = {"ServiceMonitor", "PodMonitor"}
    assert not kinds() & monitors  # auto, and this cluster has no Prometheus Operator
    assert monitors <= kinds("--api-versions", "monitoring.coreos.com/v1")
    off = kinds("--api-versions", "monitoring.coreos.com/v1", "--set", "monitoring.monitors=false")
    assert not off & monitors


# --- installed on the real API server --------------------------------------------------------


def test_the_install_runs_every_component_and_the_migrations(
    installed: Release, admin: Admin
) -> None:
    ns = installed.home
    for component in COMPONENTS:
        deployment = admin.call(
            "GET", f"/apis/apps/v1/namespaces/{ns}/deployments/plinth-{component}"
        )
        status = deployment["status"]
        assert status.get("readyReplicas") == deployment["spec"]["replicas"], component
    # The hook ran (helm waited for its Job to complete) and, having succeeded, was removed.
    assert admin.get(f"/apis/batch/v1/namespaces/{ns}/jobs/plinth-migrate") is None
    for managed in installed.managed:
        assert _names(admin, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{managed}/roles") == {
            "plinth-worker"
        }


def test_only_the_workers_pods_carry_an_api_token(installed: Release, admin: Admin) -> None:
    pods = admin.call("GET", f"/api/v1/namespaces/{installed.home}/pods")["items"]
    mounted: dict[str, set[bool]] = {}
    for pod in pods:
        component = pod["metadata"]["labels"]["app.kubernetes.io/component"]
        volumes = json.dumps(pod["spec"].get("volumes", []))
        mounted.setdefault(component, set()).add("serviceAccountToken" in volumes)
    assert mounted == {"web": {False}, "worker": {True}, "beat": {False}, "gateway": {False}}


def _decide(admin: Admin, release: Release, account: str, rights: list[Any]) -> list[Any]:
    """The rights (verb, group, resource, where) the account is granted, where filled in."""
    granted = []
    for verb, group, resource, where in rights:
        if where is not None:
            where = where.format(
                home=release.home, managed=release.managed[0], ns=release.managed[0]
            )
        if may(admin, (release.home, account), verb, group, resource, where):
            granted.append((verb, group, resource, where))
    return granted


@pytest.mark.parametrize("component", NO_API)
def test_the_console_beat_and_gateway_may_do_nothing_on_the_cluster(
    installed: Release, admin: Admin, component: str
) -> None:
    everything = WORKER_RIGHTS + WORKER_DENIED + NONE_MAY
    assert _decide(admin, installed, f"plinth-{component}", everything) == []


def test_the_installed_worker_may_do_its_work_and_none_of_the_dangerous_things(
    installed: Release, admin: Admin
) -> None:
    rights = _decide(admin, installed, "plinth-worker", WORKER_RIGHTS)
    assert len(rights) == len(WORKER_RIGHTS), "the chart's worker lacks some of its rights"
    assert _decide(admin, installed, "plinth-worker", WORKER_DENIED + NONE_MAY) == []


def test_an_endpoint_lives_and_dies_with_the_installed_workers_own_token(
    installed: Release, cluster: ControlPlane, admin: Admin
) -> None:
    """The worker's ServiceAccount as the chart installed it (its token from the TokenRequest
    API) deploys an endpoint into a namespace the chart manages, sees it ready, deletes it."""
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    path = f"/api/v1/namespaces/{installed.home}/serviceaccounts/plinth-worker/token"
    token = admin.call("POST", path, request)["status"]["token"]
    kubeconfig = cluster.kubeconfig(f"chart-worker-{installed.home}", token=token).read_text()
    driver = KubeDriver(KubeClient.from_kubeconfig(kubeconfig, policy=LOOPBACK), has_lws=False)
    ref = replace(REF, namespace=installed.managed[0])
    revision = revision_plan(load_spec("llama-3.1-8b-h100"))
    try:
        driver.apply(ref, revision)

        def ready() -> bool:
            observed = driver.observe(ref)
            return observed.ready_count(1) == revision.replicas and observed.router_ready

        wait_until(ready, "the endpoint is ready", SETTLE_S, interval=1.0)
        wait_until(lambda: driver.delete(ref), "the endpoint is gone", SETTLE_S, interval=1.0)
        pods = f"/api/v1/namespaces/{ref.namespace}/pods"
        wait_until(lambda: not _names(admin, pods), "its pods are gone", SETTLE_S, interval=1.0)
    finally:
        driver.close()


def test_upgrade_with_a_changed_value_rolls_the_pods_and_uninstall_leaves_nothing(
    cluster: ControlPlane, admin: Admin
) -> None:
    tool = Helm(cluster)
    release = _install(tool, admin)
    try:
        path = f"/apis/apps/v1/namespaces/{release.home}/deployments/plinth-web"
        before = admin.call("GET", path)
        names = ",".join(release.managed)
        tool(
            "upgrade", release.name, str(CHART), "--namespace", release.home,
            "--set", f"managedNamespaces.names={{{names}}}",
            "--set", "config.LOG_LEVEL=DEBUG", "--set", "web.replicas=3",
            # A new image: the migration Job's pod template is immutable, so the hook makes a
            # new Job (before-hook-creation) instead of a 422 on the old one.
            "--set", "image.tag=next",
            "--wait", "--timeout", f"{int(SETTLE_S)}s",
        )  # fmt: skip
        after = admin.call("GET", path)
        assert after["status"].get("readyReplicas") == 3
        [container] = after["spec"]["template"]["spec"]["containers"]
        assert container["image"].endswith(":next")
        config = admin.call("GET", f"/api/v1/namespaces/{release.home}/configmaps/plinth-config")
        assert config["data"]["LOG_LEVEL"] == "DEBUG"
        checksum = "checksum/config"
        old = before["spec"]["template"]["metadata"]["annotations"][checksum]
        assert after["spec"]["template"]["metadata"]["annotations"][checksum] != old
        history = tool("history", release.name, "--namespace", release.home, "-o", "json")
        assert [h["status"] for h in json.loads(history)] == ["superseded", "deployed"]
        tool("uninstall", release.name, "--namespace", release.home, "--wait")
        wait_until(
            lambda: not _leftovers(admin, release),
            "helm uninstall leaves nothing of the release",
            SETTLE_S,
            interval=1.0,
        )
    finally:
        _forget(admin, release)


def _operator_crd(kind: str) -> dict[str, Any]:
    """The Prometheus Operator's kind under its own group and version, with an open schema: what
    this test needs is that the API server serves monitoring.coreos.com/v1 (its discovery is what
    helm asks); the fields are checked against the operator's schema in
    tests/charts/test_monitoring.py."""
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def _serve_monitoring_api(admin: Admin) -> None:
    """The operator's kinds, once per session (they stay: a later install may render monitors)."""
    for kind in ("ServiceMonitor", "PodMonitor"):
        name = f"{kind.lower()}s.monitoring.coreos.com"
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        if admin.get(path) is None:
            admin.call(
                "POST",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                _operator_crd(kind),
            )
    wait_until(
        lambda: admin.get("/apis/monitoring.coreos.com/v1") is not None,
        "the API server serves monitoring.coreos.com/v1",
        SETTLE_S,
        interval=0.5,
    )


def test_a_cluster_with_the_prometheus_operator_gets_the_monitors(
    cluster: ControlPlane, admin: Admin
) -> None:
    _serve_monitoring_api(admin)
    tool = Helm(cluster)
    release = _install(tool, admin)
    try:
        home = f"/apis/monitoring.coreos.com/v1/namespaces/{release.home}/servicemonitors"
        assert _names(admin, home) == {"plinth-web", "plinth-gateway"}
        for managed in release.managed:
            pods = f"/apis/monitoring.coreos.com/v1/namespaces/{managed}/podmonitors"
            assert _names(admin, pods) == {"plinth-engines", "plinth-routers"}
        tool("uninstall", release.name, "--namespace", release.home, "--wait")
        assert not _names(admin, home)
    finally:
        _forget(admin, release)


def test_each_gateway_replica_knows_how_many_share_the_admission_limit() -> None:
    """``gateway.replicas`` reaches every gateway pod as ``GATEWAY_REPLICAS``: each replica admits
    its share of an endpoint's in-flight limit; three replicas told 1 would admit 3x the limit."""

    def gateway_env(*extra: str) -> dict[str, str]:
        text = helm_template(helm(), list(extra))
        [deployment] = [
            d
            for d in yaml.safe_load_all(text)
            if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "plinth-gateway"
        ]
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value", "") for e in container["env"]}

    assert gateway_env("gateway.replicas=3")["GATEWAY_REPLICAS"] == "3"
    assert gateway_env()["GATEWAY_REPLICAS"] == "2"
