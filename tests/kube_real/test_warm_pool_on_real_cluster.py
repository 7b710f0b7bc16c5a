"""A warm pool on a real API server (issue 29 item 6, ``autoscaling.warm_replicas``): the objects
accepted as the worker (its chart RBAC, which now lets it patch pods), a scale-down that keeps a
loaded pod warm instead of removing it, the pods picked serving/warm through real annotations,
and the real ReplicaSet controller removing the pod the deletion cost names.

kwok plays the kubelet, so no agent runs in these pods and every pod reads Ready: the cost alone
decides which one the controller removes (on a real node a warm pod is also unready, which the
controller ranks first; ``deployments.drivers.kube.warm`` says what follows). The agent's own
part, a real process beside a real simulated engine: tests/runtime/test_warm_agent.py.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.driver import KubeDriver
from tests.drivers.reference_specs import load_spec, revision_plan
from tests.kube_real.conftest import SETTLE_S, Admin
from tests.waiting import wait_until


def _plan(replicas: int) -> base.RevisionPlan:
    spec = load_spec("llama-3.1-8b-h100")
    pool = {"min_replicas": 0, "max_replicas": 3, "scale_to_zero": True, "warm_replicas": 1}
    spec = spec.model_copy(update={"autoscaling": spec.autoscaling.model_copy(update=pool)})
    return replace(revision_plan(spec), replicas=replicas)


def _pods(admin: Admin, ref: base.DeploymentRef) -> dict[str, dict[str, Any]]:
    """The endpoint's engine pods that are not leaving, by name."""
    items = admin.call("GET", f"/api/v1/namespaces/{ref.namespace}/pods").get("items") or []
    return {
        p["metadata"]["name"]: p
        for p in items
        if p["metadata"]["labels"].get(L.ROLE) == "engine"
        and not p["metadata"].get("deletionTimestamp")
    }


def _ready_pods(admin: Admin, ref: base.DeploymentRef, count: int) -> dict[str, dict[str, Any]]:
    def ready() -> dict[str, dict[str, Any]] | None:
        pods = _pods(admin, ref)
        statuses = [
            c.get("status") == "True"
            for p in pods.values()
            for c in p.get("status", {}).get("conditions") or []
            if c.get("type") == "Ready"
        ]
        return pods if len(pods) == count and len(statuses) == count and all(statuses) else None

    found = wait_until(ready, f"{count} engine pods ready", SETTLE_S, interval=1.0)
    assert isinstance(found, dict)
    return found


def _annotation(pod: dict[str, Any], key: str) -> str | None:
    return (pod["metadata"].get("annotations") or {}).get(key)


def test_a_scale_down_keeps_a_loaded_pod_warm_and_a_wake_takes_it_back(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    driver.apply(ref, _plan(3))
    pods = _ready_pods(admin, ref, 3)
    spec = next(iter(pods.values()))["spec"]
    assert [c["name"] for c in spec["containers"]] == ["engine", "warm-agent"]
    config_map = f"/api/v1/namespaces/{ref.namespace}/configmaps/{ref.slug}-warm-agent"
    assert admin.get(config_map) is not None

    # 3 -> 1 with a pool of 1: the oldest keeps serving, the next is kept warm, the newest goes;
    # the worker marks them (annotations written as the worker) before the count drops, and the
    # real ReplicaSet controller removes the pod the deletion cost names (it is gone before it
    # can be read back here: the survivors carry the other two marks).
    driver.apply(ref, _plan(1))
    left = _ready_pods(admin, ref, 2)
    ranked = sorted(pods, key=lambda n: (pods[n]["metadata"]["creationTimestamp"], n))
    serving, warm, surplus = ranked
    assert sorted(left) == sorted([serving, warm]), surplus
    assert _annotation(left[serving], L.DELETION_COST) == "200"
    assert _annotation(left[serving], L.WARM) is None
    assert _annotation(left[warm], L.DELETION_COST) == "100"
    assert _annotation(left[warm], L.WARM) == "true"
    seen = driver.observe(ref)
    phases = {r.name: (r.phase, r.ready) for r in seen.replicas}
    assert phases[serving] == (base.READY, True)
    assert phases[warm] == (base.RELEASED, False)
    assert seen.ready_count() == 1 and len(seen.engines()) == 1
    assert "Released" in [e.reason for e in seen.events if warm in e.message]

    # To zero: the serving pod goes, the warm one stays (the pool's count is one).
    driver.apply(ref, _plan(0))
    assert sorted(_ready_pods(admin, ref, 1)) == [warm]
    assert driver.observe(ref).engines() == []

    # The wake: the warm pod is asked back (no new pod, no cold start).
    driver.apply(ref, _plan(1))
    back = _ready_pods(admin, ref, 1)
    assert sorted(back) == [warm]
    assert _annotation(back[warm], L.WARM) == "false"
    assert _annotation(back[warm], L.DELETION_COST) == "200"
    assert driver.observe(ref).ready_count() == 1
