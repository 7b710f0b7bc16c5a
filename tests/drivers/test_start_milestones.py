"""A pod's start milestones as the kube driver reads them (``observe.start_milestones``): the
scheduler's condition, the first container started (the image pulled), the weights init
containers finished, Ready. A pure function of the pod the API returns."""

from __future__ import annotations

from datetime import UTC, datetime

from deployments.drivers.kube.observe import start_milestones
from runtime import startup


def _at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}Z"


def _epoch(second: int) -> float:
    return datetime(2026, 1, 1, 0, 0, second, tzinfo=UTC).timestamp()


POD = {
    "metadata": {"name": "chat-engine-0", "creationTimestamp": _at(0)},
    "status": {
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": _at(2)},
            {"type": "Ready", "status": "True", "lastTransitionTime": _at(50)},
        ],
        "initContainerStatuses": [
            {
                "name": "weights-0",
                "state": {"terminated": {"startedAt": _at(9), "finishedAt": _at(30)}},
            }
        ],
        "containerStatuses": [
            {"name": "engine", "state": {"running": {"startedAt": _at(31)}}, "ready": True}
        ],
    },
}


def test_a_ready_pods_milestones_from_its_conditions_and_containers() -> None:
    assert start_milestones(POD) == {
        startup.CREATED: _epoch(0),
        startup.SCHEDULED: _epoch(2),
        startup.IMAGE_PULLED: _epoch(9),  # the weights container runs the engine's image
        startup.WEIGHTS_DOWNLOADED: _epoch(30),
        startup.READY: _epoch(50),
    }


def test_a_pod_still_downloading_has_no_weights_milestone_and_waits_on_it() -> None:
    status = dict(POD["status"])
    status["conditions"] = [status["conditions"][0]]
    status["initContainerStatuses"] = [
        {"name": "weights-0", "state": {"running": {"startedAt": _at(9)}}}
    ]
    status["containerStatuses"] = [{"name": "engine", "state": {"waiting": {}}}]
    milestones = start_milestones({**POD, "status": status})
    assert startup.WEIGHTS_DOWNLOADED not in milestones and startup.READY not in milestones
    assert startup.waiting_on(milestones) == startup.WEIGHTS_DOWNLOADED
