"""Prefill/decode on Kubernetes: each pool at its own size and GPU count, whatever the endpoint's
desired replicas; per-role pods observed as per-role replicas.

Why the emulator (a stand-in, see kube_emulator.py) in the one test that uses it: it writes a
decode pod that is not ready beside ready ones and checks the per-role counts, a mixed state kwok
(which readies every pod it runs) does not produce on demand. Both pools becoming ready on real
controllers is
tests/kube_real/test_endpoint_on_real_cluster.py::test_prefill_and_decode_pools_become_ready.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from deployments import status
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.render import KubeOptions, render_revision
from runtime.spec import RuntimeSpec
from tests.drivers.kube_emulator import CLIENT_TIMEOUT_S, RunningEmulator
from tests.drivers.reference_specs import REF, load_spec, revision_plan

NS = REF.namespace


def pd_spec(prefill_tp: int | None = None, decode_replicas: int = 2) -> RuntimeSpec:
    data = load_spec("llama-3.1-70b-pd-h100").model_dump(mode="json", exclude_unset=True)
    data["disaggregation"]["prefill"] = {"replicas": 1, "tp": prefill_tp}
    data["disaggregation"]["decode"] = {"replicas": decode_replicas}
    return RuntimeSpec.model_validate(data)


def workloads(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}


def gpus(workload: dict[str, Any]) -> str:
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return str(container["resources"]["limits"]["nvidia.com/gpu"])


@pytest.mark.parametrize("desired", [1, 5])
def test_each_pool_runs_its_own_replica_count_whatever_the_desired_replicas(desired: int) -> None:
    plan = dataclasses.replace(revision_plan(pd_spec(decode_replicas=2)), replicas=desired)
    found = workloads(render_revision(REF, plan, KubeOptions()))
    assert found["chat-prefill"]["spec"]["replicas"] == 1
    assert found["chat-decode"]["spec"]["replicas"] == 2
    assert found["chat-router"]["spec"]["replicas"] == 1


def test_a_plain_engine_follows_the_desired_replicas() -> None:
    plan = dataclasses.replace(revision_plan(load_spec("llama-3.1-8b-h100")), replicas=3)
    engine = workloads(render_revision(REF, plan, KubeOptions()))["chat-engine"]
    assert engine["spec"]["replicas"] == 3


def test_each_pool_requests_the_gpus_of_its_own_tp() -> None:
    found = workloads(render_revision(REF, revision_plan(pd_spec(prefill_tp=2)), KubeOptions()))
    assert gpus(found["chat-prefill"]) == "2"
    assert gpus(found["chat-decode"]) == "4"  # parallelism.tp
    # Each pool's shared memory follows its own GPU count too.
    shm = {
        name: next(v for v in w["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm")
        for name, w in found.items()
        if name != "chat-router"
    }
    assert shm["chat-prefill"]["emptyDir"]["sizeLimit"] == "16Gi"
    assert shm["chat-decode"]["emptyDir"]["sizeLimit"] == "24Gi"


def _pod(name: str, role: str, ready: bool) -> dict[str, Any]:
    from deployments.drivers.kube import labels as L

    return {
        "metadata": {"name": name, "labels": L.object_labels(REF.slug, REF.id, 1, role)},
        "spec": {"containers": [{"name": "engine", "ports": [{"containerPort": 30000}]}]},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.9",
            "containerStatuses": [{"name": "engine", "ready": ready, "started": True}],
        },
    }


def test_pools_reach_the_cluster_at_their_sizes_and_come_back_per_role(
    emulator: RunningEmulator,
) -> None:
    client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
    try:
        driver = KubeDriver(client)
        driver.apply(REF, revision_plan(pd_spec(decode_replicas=3)))
        decode = emulator.get("apps/v1", "Deployment", NS, "chat-decode")
        prefill = emulator.get("apps/v1", "Deployment", NS, "chat-prefill")
        assert decode is not None and decode["spec"]["replicas"] == 3
        assert prefill is not None and prefill["spec"]["replicas"] == 1
        for name, role, ready in (
            ("chat-prefill-a", "prefill", True),
            ("chat-decode-a", "decode", True),
            ("chat-decode-b", "decode", False),
        ):
            emulator.put("v1", "Pod", NS, _pod(name, role, ready))
        seen = driver.observe(REF)
        assert {(r.role, r.ready) for r in seen.replicas} == {
            ("prefill", True),
            ("decode", True),
            ("decode", False),
        }
        counts = status.role_counts([r.as_dict() for r in seen.replicas], applied=1)
        assert counts == {"prefill": (1, 1), "decode": (1, 2)}
    finally:
        client.close()


def _split(decode_ready: bool) -> status.Facts:
    replicas = [
        {"name": "p", "role": "prefill", "revision": 1, "ready": True, "phase": "ready"},
        {"name": "d", "role": "decode", "revision": 1, "ready": decode_ready, "phase": "loading"},
    ]
    return status.Facts(
        desired_state="running", desired_replicas=1, target_revision=1, applied_revision=1,
        current_revision=1, ready_replicas=1 + decode_ready, total_replicas=2,
        **status.replica_counts(replicas, 1),
    )  # fmt: skip


def test_a_split_endpoint_serves_only_with_both_pools_up() -> None:
    assert status.derive_status(_split(decode_ready=True)) == status.ACTIVE
    down = _split(decode_ready=False)
    assert down.pool_down
    assert status.derive_status(down) == status.LOADING  # prefill alone answers nothing
    assert not status.is_settled(down)
