"""A Deployment the controller gave up on (``ProgressDeadlineExceeded``) fails its revision only
while the condition is about the template now applied. The race this guards (an edit applied,
the controller not yet at it) is too short to catch on the real server, where
tests/kube_real/test_failure_reasons_on_real_cluster.py shows the rest: so these are the API's
objects as plain dicts."""

from __future__ import annotations

from typing import Any

from deployments.drivers.kube import labels as L
from deployments.drivers.kube.observe import observation

GAVE_UP = {
    "type": "Progressing",
    "status": "False",
    "reason": "ProgressDeadlineExceeded",
    "message": 'ReplicaSet "chat-engine-5d9" has timed out progressing.',
    "lastTransitionTime": "2026-12-05T00:00:00Z",
}


def deployment(revision: int, generation: int, observed: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "chat-engine",
            "uid": "u-1",
            "generation": generation,
            "labels": {L.REVISION: str(revision)},
        },
        "status": {"observedGeneration": observed, "conditions": [GAVE_UP]},
    }


def test_the_controllers_verdict_fails_the_revision_it_was_about() -> None:
    seen = observation([], [], "", workloads=[deployment(1, generation=2, observed=2)])
    failure = seen.failure(1)
    assert failure is not None and failure.reason == "ProgressDeadlineExceeded"
    assert failure.message == f"Deployment chat-engine: {GAVE_UP['message']}"
    assert [e.reason for e in seen.events] == ["ProgressDeadlineExceeded"]


def test_a_verdict_older_than_the_applied_template_counts_for_nothing() -> None:
    """Revision 2 was just applied (generation 3); the condition is still revision 1's."""
    seen = observation([], [], "", workloads=[deployment(2, generation=3, observed=2)])
    assert seen.failure(2) is None and not seen.events
