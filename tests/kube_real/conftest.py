"""One real control plane per test session (``control_plane.ControlPlane``), its fake nodes, and
a fresh namespace per test, so tests run in any order on the shared cluster.

Nodes (kwok's): one without GPUs for routers, and GPU nodes labelled and tainted as NVIDIA's GPU
feature discovery and device plugin leave them (``nvidia.com/gpu.product``, capacity
``nvidia.com/gpu``, the ``nvidia.com/gpu`` NoSchedule taint Plinth's engine pods tolerate).
When a test that uses the cluster fails, the last lines of every process's log are added to its
report; the whole logs stay in the run directory.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cache, partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from deployments.drivers import base
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.egress import EgressPolicy
from deployments.drivers.kube.kubeconfig import KubeconfigPolicy
from runtime.catalog import GPU_PRODUCT_LABEL, get_gpu
from scripts.render_k8s import VALUES as K8S_VALUES
from scripts.render_k8s import helm_template
from tests.drivers.reference_specs import REF
from tests.kube_real.control_plane import KWOK_NODE, ControlPlane, binaries_dir
from tests.waiting import wait_until

PLATFORM_NAMESPACE = "plinth-system"  # where the chart's fixed rendering (k8s/) runs the worker
WORKER_ACCOUNT = "plinth-worker"
GPUS_PER_NODE = 8
# Catalogue GPU id -> how many kwok nodes hold it. H200: two groups of a two-node replica
# (tests/runtime/golden/deepseek-v3-tp16-2x-h200), the one serving and the one a rolling
# update of its LeaderWorkerSet surges.
GPU_NODES = {"H100-SXM": 2, "B200": 1, "H200": 4}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# Loopback is private: the egress fence must be told that this cluster may be reached.
LOOPBACK = KubeconfigPolicy(egress=EgressPolicy.build(allow=["127.0.0.1/32"]))
# Polls of the real controllers: generous, since a loaded 2-core machine runs them slowly.
SETTLE_S = 180.0
# Failures kwok makes on demand, for pods carrying a test label (the file says which).
TEST_STAGES = Path(__file__).with_name("kwok-test-stages.yaml")

_running: list[ControlPlane] = []


class Admin:
    """JSON calls as the cluster admin, for what tests set up or check outside Plinth's client
    (Nodes, namespaces); the reply's own words are kept, unlike Plinth's client's errors."""

    def __init__(self, cluster: ControlPlane) -> None:
        self.cluster = cluster
        self._context: ssl.SSLContext = cluster.ssl_context()

    def call(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.cluster.url + path,
            data=data,
            method=method,
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, context=self._context, timeout=30) as reply:
                result: dict[str, Any] = json.loads(reply.read() or b"{}")
                return result
        except urllib.error.HTTPError as error:
            raise AssertionError(f"{method} {path}: {error.code} {error.read()[:2000]!r}") from None

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return self.call("GET", path)
        except AssertionError as error:
            if ": 404 " in str(error):
                return None
            raise


def _node(name: str, gpu: str | None, scale: int = 1) -> dict[str, Any]:
    """A kwok node; ``scale`` times the CPUs, pods and GPUs of one (a benchmark's thousand)."""
    labels = {"kubernetes.io/hostname": name, "type": "kwok"}
    capacity = {
        "cpu": str(224 * scale),
        "memory": "2Ti",
        "ephemeral-storage": "10Ti",
        "pods": str(110 * scale),
    }
    spec: dict[str, Any] = {}
    if gpu is not None:
        labels[GPU_PRODUCT_LABEL] = get_gpu(gpu).gpu_products[0]
        labels["nvidia.com/gpu.count"] = str(GPUS_PER_NODE * scale)
        capacity["nvidia.com/gpu"] = str(GPUS_PER_NODE * scale)
        spec["taints"] = [GPU_TAINT]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": dict(KWOK_NODE)},
        "spec": spec,
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _nodes(scale: int = 1) -> list[dict[str, Any]]:
    nodes = [_node("kwok-cpu-0", None, scale)]
    for gpu, count in GPU_NODES.items():
        nodes += [_node(f"kwok-{gpu.lower()}-{i}", gpu, scale) for i in range(count)]
    return nodes


def _ready_at(admin: Admin, path: str) -> bool:
    conditions = ((admin.get(path) or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running_cluster(tmp_path_factory.mktemp("kube")) as plane:
        yield plane


@contextmanager
def running_cluster(run_dir: Path, scale: int = 1) -> Iterator[ControlPlane]:
    """A started control plane with its kwok nodes Ready (``scale``: each that many times as
    big); stopped on leaving. The session's ``cluster``, a test module's own (one that restarts
    its API server), or bench/kube_scale.py's."""
    plane = ControlPlane(run_dir=run_dir, bin_dir=binaries_dir(), kwok_stages=(TEST_STAGES,))
    _running.append(plane)
    try:
        plane.start()
        admin = Admin(plane)
        for node in _nodes(scale):
            admin.call("POST", "/api/v1/nodes", node)
        for node in _nodes(scale):
            path = f"/api/v1/nodes/{node['metadata']['name']}"
            plane.wait(partial(_ready_at, admin, path), f"kwok makes {path} Ready")
        yield plane
    finally:
        plane.stop()
        _running.remove(plane)


def wait_nothing_left(paths: Iterable[str], owned: Callable[[str], list[Any]]) -> None:
    """Until ``owned(path)`` lists nothing at any of ``paths`` (what a delete leaves, as the
    garbage collector and kwok finish); a timeout names what is still there."""

    def left() -> dict[str, list[str]]:
        found = {p: [o["metadata"]["name"] for o in owned(p)] for p in paths}
        return {p: names for p, names in found.items() if names}

    wait_until(
        lambda: not left(),
        "nothing of the endpoint is left",
        SETTLE_S,
        interval=1.0,
        output=lambda: str(left()),
    )


@pytest.fixture(scope="session")
def admin(cluster: ControlPlane) -> Admin:
    return Admin(cluster)


@dataclass
class Started:
    """One of the two-cluster tests' control planes: its name, admin, and the worker's token."""

    name: str
    plane: ControlPlane
    admin: Admin
    token: str  # the worker's ServiceAccount's


@pytest.fixture(scope="session")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Started, Started]]:
    """Two control planes beside the session's ``cluster`` (east and west), for the tests of an
    endpoint spread over two clusters (test_fleet_on_real_clusters, whose failover stops east's
    API server and starts it again, and test_fleet_routes_on_real_clusters). One pair for both
    modules: each test works in namespaces of its own there (their ``planes``)."""
    with (
        running_cluster(tmp_path_factory.mktemp("kube-east")) as east,
        running_cluster(tmp_path_factory.mktemp("kube-west")) as west,
    ):
        pair = [
            Started(name, plane, admin, grant_worker_token(admin))
            for name, plane, admin in (("east", east, Admin(east)), ("west", west, Admin(west)))
        ]
        yield pair[0], pair[1]


@pytest.fixture
def namespace(admin: Admin) -> Iterator[str]:
    """A fresh namespace, with its ``default`` ServiceAccount (which pods need) made by the
    controller manager. Deleted afterwards; its pods are waited for (the namespace controller
    deletes them, kwok ends them), so no GPU they held is taken when the next test starts."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    admin.call("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    wait_until(
        lambda: admin.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        "the namespace's default ServiceAccount",
        SETTLE_S,
        interval=0.3,
    )
    yield name
    delete_namespace(admin, name)


def delete_namespace(admin: Admin, name: str) -> None:
    """Delete a namespace and wait until its pods are gone (so no GPU they held is taken).

    The namespace controller waits 5 s after a namespace starts terminating before it deletes
    what is in it (its ``namespaceDeletionGracePeriod``), a fixed cost on every test. The pods
    are asked to go here at once instead, as the controller would ask (gracefully: kwok, the
    kubelet, ends them); the terminating namespace already refuses new ones, and the controller
    still deletes everything else, and any pod that slipped in, after its wait."""
    admin.call("DELETE", f"/api/v1/namespaces/{name}")
    pods = f"/api/v1/namespaces/{name}/pods"
    admin.call("DELETE", pods)
    wait_until(
        lambda: not admin.call("GET", pods).get("items"),
        f"the pods of {name} are gone",
        SETTLE_S,
        interval=0.2,
    )


@pytest.fixture
def ref(namespace: str) -> base.DeploymentRef:
    return replace(REF, namespace=namespace)


@pytest.fixture
def admin_client(cluster: ControlPlane) -> Iterator[KubeClient]:
    """Plinth's own client as the cluster admin, built from a kubeconfig as a tenant's is."""
    client = KubeClient.from_kubeconfig(
        cluster.path("admin.kubeconfig").read_text(), policy=LOOPBACK
    )
    yield client
    client.close()


@cache
def chart_worker() -> tuple[dict[str, Any], ...]:
    """The worker's objects of the chart (its ServiceAccount and RBAC), as ``helm template``
    renders them for k8s/ (scripts/render_k8s.py). Callers copy what they change."""
    rendered = helm_template(binaries_dir() / "helm", K8S_VALUES)
    return tuple(
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "worker"
    )


@pytest.fixture(scope="session")
def worker_token(cluster: ControlPlane, admin: Admin) -> str:
    """A real token of the worker's ServiceAccount (the chart's), from the TokenRequest API."""
    return grant_worker_token(admin)


def grant_worker_token(admin: Admin) -> str:
    """The worker's ServiceAccount and cluster-wide rights (the chart's GPU inventory) made, and
    a real token of it."""
    admin.call("POST", "/api/v1/namespaces", {"metadata": {"name": PLATFORM_NAMESPACE}})
    worker = chart_worker()
    [account] = [d for d in worker if d["kind"] == "ServiceAccount"]
    assert account["metadata"]["name"] == WORKER_ACCOUNT
    admin.call("POST", f"/api/v1/namespaces/{PLATFORM_NAMESPACE}/serviceaccounts", account)
    for document in [d for d in worker if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]:
        plural = document["kind"].lower() + "s"
        admin.call("POST", f"/apis/rbac.authorization.k8s.io/v1/{plural}", document)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 6 * 3600},
    }
    path = f"/api/v1/namespaces/{PLATFORM_NAMESPACE}/serviceaccounts/{WORKER_ACCOUNT}/token"
    return str(admin.call("POST", path, request)["status"]["token"])


@pytest.fixture
def worker_kubeconfig(
    cluster: ControlPlane,
    admin: Admin,
    namespace: str,
    worker_token: str,
) -> str:
    """A kubeconfig with the worker's own token, which has nothing but the rights the chart
    grants it in a managed namespace, here ``namespace`` (and its GPU inventory's, cluster-wide)."""
    return worker_kubeconfig_for(cluster, admin, namespace, worker_token)


def worker_kubeconfig_for(cluster: ControlPlane, admin: Admin, namespace: str, token: str) -> str:
    """The worker's rights in ``namespace`` granted, and a kubeconfig with its ``token``."""
    for document in [
        json.loads(json.dumps(d)) for d in chart_worker() if d["kind"] in ("Role", "RoleBinding")
    ]:
        document["metadata"]["namespace"] = namespace
        plural = document["kind"].lower() + "s"
        admin.call(
            "POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{plural}", document
        )
    # The authorizer sees a new RoleBinding through its own informer, a moment later (longer on
    # a loaded machine): the worker's first call could be refused 403 until then.
    wait_until(
        lambda: worker_may(admin, namespace, "get", "apps", "deployments"),
        "the worker's rights in the namespace are in force",
        SETTLE_S,
        interval=0.2,
    )
    return cluster.kubeconfig(f"worker-{namespace}", token=token).read_text()


def worker_may(admin: Admin, namespace: str, verb: str, group: str, resource: str) -> bool:
    """What the API server's own authorizer answers for the worker's ServiceAccount."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{PLATFORM_NAMESPACE}:{WORKER_ACCOUNT}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{PLATFORM_NAMESPACE}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": group,
                "resource": resource,
            },
        },
    }
    answer = admin.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer.get("status", {}).get("allowed"))


@pytest.fixture
def worker_client(worker_kubeconfig: str) -> Iterator[KubeClient]:
    """Plinth's client as the worker (its ServiceAccount's token)."""
    client = KubeClient.from_kubeconfig(worker_kubeconfig, policy=LOOPBACK)
    yield client
    client.close()


@pytest.fixture
def driver(worker_client: KubeClient) -> KubeDriver:
    """The driver as the worker runs it: its ServiceAccount's token, least privilege, on a
    cluster with LeaderWorkerSet installed."""
    return KubeDriver(worker_client)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    uses = {"cluster", "own_cluster"} & set(getattr(item, "fixturenames", ()))
    if report.failed and uses and _running:
        report.sections.append(("kube control plane logs", _running[-1].logs()))
    return report
