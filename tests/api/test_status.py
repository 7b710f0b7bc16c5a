"""``status`` and ``settled`` in the API never lie: from the moment a change commits the
endpoint is unsettled until what runs is what was asked for (issue 12 item 8)."""

from __future__ import annotations

from typing import Any

from deployments.endpoints.models import Deployment
from tests.api.conftest import Clients, spec_with
from tests.observed import observe


def _state(api: Clients) -> dict[str, Any]:
    body = api.carol.get("deployments/chat").json()
    keys = ("status", "settled", "current_revision", "target_revision")
    return {k: body[k] for k in keys}


def test_a_patch_is_unsettled_until_its_revision_serves(api: Clients, endpoint: Deployment) -> None:
    observe(endpoint, serving=1, ready={1: 1})
    assert _state(api)["settled"] is True
    patched = api.dave.patch(
        "deployments/chat", {"spec": spec_with(batching={"max_running_requests": 64}),
                             "base_revision": 1},
    )  # fmt: skip
    assert patched.status_code == 200, patched.content
    assert patched.json()["settled"] is False
    expected = {"status": "deploying", "settled": False, "current_revision": 1,
                "target_revision": 2}  # fmt: skip
    assert _state(api) == expected
    # The pass places revision 2 next to revision 1: still rolling out.
    observe(endpoint, serving=1, ready={1: 1}, starting={2: 1})
    assert _state(api) == expected
    # Revision 2 is promoted while revision 1 is still up (2 ready for 1 desired).
    observe(endpoint, serving=2, ready={1: 1, 2: 1})
    assert _state(api)["settled"] is False
    observe(endpoint, serving=2, ready={2: 1})
    assert _state(api) == {"status": "active", "settled": True, "current_revision": 2,
                           "target_revision": 2}  # fmt: skip


def test_a_rollback_is_unsettled_at_once(api: Clients, endpoint: Deployment) -> None:
    edited = api.dave.patch(
        "deployments/chat", {"spec": spec_with(batching={"max_running_requests": 64}),
                             "base_revision": 1},
    )  # fmt: skip
    assert edited.status_code == 200
    observe(endpoint, serving=2, ready={2: 1})
    assert _state(api)["settled"] is True
    assert api.dave.post("deployments/chat/rollback", {"to_revision": 1}).status_code == 200
    assert _state(api) == {"status": "deploying", "settled": False, "current_revision": 2,
                           "target_revision": 3}  # fmt: skip


def test_scale_stop_and_start_are_unsettled_until_observed(
    api: Clients, endpoint: Deployment
) -> None:
    observe(endpoint, serving=1, ready={1: 1})
    assert api.dave.post("deployments/chat/scale", {"replicas": 2}).status_code == 200
    assert _state(api)["settled"] is False
    observe(endpoint, serving=1, ready={1: 1}, starting={1: 1})
    assert _state(api)["settled"] is False
    observe(endpoint, serving=1, ready={1: 2})
    assert _state(api)["settled"] is True
    assert api.dave.post("deployments/chat/stop").status_code == 200
    assert _state(api)["settled"] is False


def test_observed_generation_trails_generation_until_a_pass_sees_the_change(
    api: Clients, endpoint: Deployment
) -> None:
    observe(endpoint, serving=1, ready={1: 1})
    seen = api.carol.get("deployments/chat").json()
    assert seen["observed_generation"] == seen["generation"]
    scaled = api.dave.post("deployments/chat/scale", {"replicas": 2}).json()
    assert scaled["observed_generation"] == seen["generation"] < scaled["generation"]
    observe(endpoint, serving=1, ready={1: 2})
    after = api.carol.get("deployments/chat").json()
    assert after["observed_generation"] == after["generation"] == scaled["generation"]
