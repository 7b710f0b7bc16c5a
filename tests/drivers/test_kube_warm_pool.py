"""Which pods a Kubernetes warm pool keeps serving, warm or leaving (``kube.warm.plan_pool``),
over pods as the API returns them; the real controllers' part: tests/kube_real."""

from __future__ import annotations

from typing import Any

from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube import observe
from deployments.drivers.kube.warm import live_pods, plan_pool


def _pod(name: str, created: str, *, warm: str | None = None, ready: bool = True) -> dict[str, Any]:
    annotations = {L.WARM: warm} if warm is not None else {}
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": created,
            "labels": {L.ROLE: "engine", L.REVISION: "1"},
            "annotations": annotations,
        },
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_a_scale_down_keeps_the_oldest_serving_the_next_warm_and_marks_the_rest_to_go() -> None:
    pods = [_pod("c", "2026-01-01T00:00:03Z"), _pod("a", "2026-01-01T00:00:01Z")]
    pods.append(_pod("b", "2026-01-01T00:00:02Z"))
    plan = plan_pool(pods, wanted=1, warm_replicas=1, now=100.0)
    assert plan.kept == 1
    assert plan.annotations == {
        "a": {L.DELETION_COST: "200"},
        "b": {L.WARM: "true", L.DELETION_COST: "100", L.WARM_AT: "100.000"},
        "c": {L.WARM: "true", L.DELETION_COST: "-100"},  # on its way out: no timeline line
    }


def test_at_zero_the_warm_pod_stays_and_a_wake_asks_it_back() -> None:
    serving = _pod("a", "2026-01-01T00:00:01Z")
    serving["metadata"]["annotations"][L.DELETION_COST] = "200"
    warm = _pod("b", "2026-01-01T00:00:02Z", warm="true", ready=False)
    warm["metadata"]["annotations"][L.DELETION_COST] = "100"
    to_zero = plan_pool([serving, warm], wanted=0, warm_replicas=1, now=100.0)
    assert to_zero.kept == 1
    assert to_zero.annotations == {"a": {L.WARM: "true", L.DELETION_COST: "-100"}}
    woken = plan_pool([warm], wanted=1, warm_replicas=1, now=200.0)
    assert woken.kept == 0
    assert woken.annotations == {
        "b": {L.WARM: "false", L.DELETION_COST: "200", L.WARM_AT: "200.000"}
    }
    # Its timeline: the release and the resume, one line each, keyed by when.
    warm["metadata"]["annotations"][L.WARM_AT] = "100.000"
    [released] = observe.warm_pool_events([warm])
    warm["metadata"]["annotations"].update(woken.annotations["b"])
    [resumed] = observe.warm_pool_events([warm])
    assert (released.reason, resumed.reason) == ("Released", "Resumed")
    assert released.key != resumed.key


def test_no_pod_is_started_for_the_pool_and_settled_pods_need_no_write() -> None:
    pods = [_pod("a", "2026-01-01T00:00:01Z")]
    pods[0]["metadata"]["annotations"][L.DELETION_COST] = "200"
    plan = plan_pool(pods, wanted=1, warm_replicas=2)
    assert plan.kept == 0 and plan.annotations == {}


def test_only_this_revisions_live_engine_pods_count() -> None:
    leaving = _pod("x", "2026-01-01T00:00:01Z")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    other = _pod("y", "2026-01-01T00:00:01Z")
    other["metadata"]["labels"][L.REVISION] = "2"
    router = _pod("z", "2026-01-01T00:00:01Z")
    router["metadata"]["labels"][L.ROLE] = "router"
    mine = _pod("a", "2026-01-01T00:00:01Z")
    assert live_pods([leaving, other, router, mine], revision=1) == [mine]


def _running(name: str, *, warm: str | None, agent_ready: bool = True) -> dict[str, Any]:
    pod = _pod(name, "2026-01-01T00:00:01Z", warm=warm, ready=agent_ready)
    pod["status"].update(
        phase="Running",
        containerStatuses=[
            {"name": "engine", "ready": True, "started": True, "state": {"running": {}}},
            {"name": "warm-agent", "ready": agent_ready, "started": True, "state": {"running": {}}},
        ],
    )
    return pod


def test_warm_pods_read_released_then_resuming_until_their_agent_is_ready() -> None:
    """SGLang's own /ready may still answer 200 while released (it checks up and not paused):
    the annotation decides, and a pod asked back serves once its agent says so."""
    released = observe.replica_facts(_running("a", warm="true"))
    assert (released.phase, released.ready, released.reason) == (base.RELEASED, False, "WarmPool")
    resuming = observe.replica_facts(_running("b", warm="false", agent_ready=False))
    assert (resuming.phase, resuming.ready) == (base.RESUMING, False)
    back = observe.replica_facts(_running("c", warm="false"))
    assert (back.phase, back.ready) == (base.READY, True)
    plain = observe.replica_facts(_running("d", warm=None))
    assert (plain.phase, plain.ready) == (base.READY, True)
    seen = base.Observation(replicas=(released, resuming, back))
    assert [r.name for r in seen.engines()] == ["b", "c"]  # resuming: on its way to serve
