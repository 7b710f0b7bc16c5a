"""Cold starts on a real API server (issue 29, items 5 and 6): a replica's start milestones read
from the pod conditions the real scheduler and kwok's kubelet write (PodScheduled, the first
container started, the weights init containers finished, Ready), and the DaemonSet that
pre-stages an endpoint's weights on its GPU type's nodes, accepted by the API server as the
worker (its chart RBAC) and run by the real DaemonSet controller on exactly those nodes.

kwok plays the kubelet, so there is no engine log here: the engine's own phases (load, CUDA
graphs, warm-up) are the simulator's tests' (tests/runtime/sim/test_cold_start.py) and the local
cluster's (tests/api/test_replica_starts.py); their time is the ready phase's here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.driver import KubeDriver
from runtime import startup
from tests.drivers.reference_specs import load_spec, revision_plan
from tests.kube_real.conftest import GPU_NODES, SETTLE_S, Admin
from tests.waiting import wait_until


def _ready_engine(driver: KubeDriver, ref: base.DeploymentRef) -> base.ReplicaFacts:
    def find() -> base.ReplicaFacts | None:
        return next((r for r in driver.observe(ref).engines(1) if r.ready), None)

    found = wait_until(find, "an engine replica ready", SETTLE_S, interval=1.0)
    assert isinstance(found, base.ReplicaFacts)
    return found


def test_a_replicas_start_phases_come_from_its_real_pod_conditions(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    driver.apply(ref, revision_plan(load_spec("llama-3.1-8b-h100")))
    engine = _ready_engine(driver, ref)
    milestones = engine.milestones
    for phase in (startup.CREATED, startup.SCHEDULED, startup.IMAGE_PULLED, startup.READY):
        assert phase in milestones, phase
    # The pod's own words: the scheduler's condition, kwok's container and Ready times.
    pod = admin.call("GET", f"/api/v1/namespaces/{ref.namespace}/pods/{engine.name}")
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert scheduled["status"] == "True"
    assert milestones[startup.CREATED] <= milestones[startup.SCHEDULED]
    assert milestones[startup.SCHEDULED] <= milestones[startup.READY]
    phases = startup.durations(milestones)
    assert startup.SCHEDULED in phases and startup.READY in phases
    total = milestones[startup.READY] - milestones[startup.CREATED]
    assert abs(sum(phases.values()) - total) < 0.01


def _daemon_pods(admin: Admin, ref: base.DeploymentRef) -> list[dict[str, Any]]:
    pods = admin.call("GET", f"/api/v1/namespaces/{ref.namespace}/pods").get("items") or []
    return [p for p in pods if p["metadata"]["labels"].get(L.PRESTAGE_OF) == ref.id]


def test_prestaged_weights_run_on_every_node_of_the_gpu_type_and_only_there(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    spec = load_spec("llama-3.1-8b-h100")
    spec = spec.model_copy(
        update={"autoscaling": spec.autoscaling.model_copy(update={"prestage_weights": True})}
    )
    revision = revision_plan(spec)
    assert revision.prestage_weights
    driver.apply(ref, revision)
    path = f"/apis/apps/v1/namespaces/{ref.namespace}/daemonsets/{ref.slug}-prestage"
    daemonset = admin.get(path)
    assert daemonset is not None and L.is_ours(daemonset, ref.id)

    def placed() -> list[str] | None:
        nodes = sorted(p["spec"].get("nodeName") or "" for p in _daemon_pods(admin, ref))
        return nodes if len(nodes) == GPU_NODES["H100-SXM"] and all(nodes) else None

    nodes = wait_until(placed, "a pre-staging pod per H100 node", SETTLE_S, interval=1.0)
    assert nodes == [f"kwok-h100-sxm-{i}" for i in range(GPU_NODES["H100-SXM"])]
    # Its pods are never taken for replicas, and it stays while the endpoint is stopped.
    assert all(r.role != L.PRESTAGE for r in driver.observe(ref).replicas)
    assert len(driver.observe(ref).engines()) == revision.replicas
    wait_until(lambda: driver.stop(ref), "stopped", SETTLE_S, interval=1.0)
    assert admin.get(path) is not None
    # Asked no more: the next apply prunes it.
    driver.apply(ref, replace(revision, prestage_weights=False))
    wait_until(lambda: admin.get(path) is None, "pre-staging removed", SETTLE_S, interval=1.0)
