"""A cluster's availability (``deployments.fleet.health.judge``): lost only after the grace
period of failures, back only after answering for the return hold (hysteresis)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from deployments.cluster_settings import ClusterSettings
from deployments.drivers.kube.client import KubeTemporaryError
from deployments.drivers.kube.placement import gpu_node_readiness
from deployments.fleet.health import Availability, judge, unanswered

T0 = datetime(2026, 12, 5, 6, 0, tzinfo=UTC)
GRACE, HOLD = 15, 120


def after(was: Availability, failure: str, seconds: float) -> Availability:
    return judge(was, failure, T0 + timedelta(seconds=seconds), GRACE, HOLD)


def test_a_cluster_is_lost_only_once_it_has_failed_for_the_grace_period() -> None:
    first = after(Availability(), "the API server does not answer", 0)
    assert first.available and first.failing_since == T0
    still = after(first, "the API server does not answer", GRACE - 1)
    assert still.available
    lost = after(still, "the API server does not answer", GRACE)
    assert not lost.available
    assert lost.unavailable_reason == "the API server does not answer"
    assert lost.unavailable_since == T0 + timedelta(seconds=GRACE)


def test_one_good_answer_restarts_the_grace_period() -> None:
    failing = after(Availability(), "down", 0)
    answered = after(failing, "", 10)
    assert answered.failing_since is None
    assert after(after(answered, "down", 11), "down", 20).available


def test_a_lost_cluster_comes_back_only_after_answering_for_the_hold() -> None:
    lost = after(after(Availability(), "down", 0), "down", GRACE)
    answering = after(lost, "", 30)
    assert not answering.available and answering.healthy_since == T0 + timedelta(seconds=30)
    assert not after(answering, "", 30 + HOLD - 1).available
    back = after(answering, "", 30 + HOLD)
    assert back.available and back.unavailable_since is None and back.unavailable_reason == ""


def test_a_flapping_cluster_never_comes_back() -> None:
    # It answers, fails once, answers again: each failure restarts the hold.
    state = after(after(Availability(), "down", 0), "down", GRACE)
    for second in range(30, 30 + 3 * HOLD, 20):
        failure = "down" if (second // 20) % 5 == 0 else ""
        state = after(state, failure, second)
        assert not state.available, f"back at {second} s though it failed within the hold"


def test_a_cluster_whose_gpu_nodes_are_all_not_ready_has_none_ready() -> None:
    def node(name: str, gpus: int, ready: str) -> dict[str, object]:
        return {
            "metadata": {"name": name},
            "status": {
                "allocatable": {"nvidia.com/gpu": str(gpus)} if gpus else {},
                "conditions": [{"type": "Ready", "status": ready}],
            },
        }

    settings = ClusterSettings()
    nodes = [node("cpu", 0, "True"), node("gpu-0", 8, "False"), node("gpu-1", 8, "Unknown")]
    assert gpu_node_readiness(nodes, settings) == (2, 0)
    assert gpu_node_readiness([*nodes, node("gpu-2", 8, "True")], settings) == (3, 1)


def test_a_rate_limited_check_is_an_answer_and_a_refused_connection_is_not() -> None:
    assert unanswered(KubeTemporaryError("Kubernetes API 429: rate limited", status=429)) == ""
    failed = unanswered(KubeTemporaryError("Kubernetes API did not answer"))
    assert failed == "the API server does not answer: Kubernetes API did not answer"
    assert unanswered(KubeTemporaryError("Kubernetes API 503: the API server failed", status=503))
