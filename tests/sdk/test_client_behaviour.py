"""The SDK's own behaviour where a running Plinth cannot make it happen on demand: retries after
a lost answer reuse one Idempotency-Key, and any error answer becomes a typed exception.

The SDK is imported from sdk/ (test_sdk.py proves it installs and runs alone).
"""

from __future__ import annotations

import sys
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.sim.launcher import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "sdk"))

import plinth
from plinth import client as sdk_client
from plinth.errors import error_from_response

DETAIL = {
    "id": "8a6b5f0e-8f7a-4bd4-9d0e-2f7a3c1d9e10", "slug": "x", "name": "x", "labels": {},
    "status": "pending", "settled": False, "desired_state": "running", "desired_replicas": 1,
    "ready_replicas": 0, "target_revision": 1, "current_revision": None, "generation": 1,
    "observed_generation": 0, "failure_reason": "", "url": "http://gw/endpoints/x/v1",
    "cluster": {"id": "8a6b5f0e-8f7a-4bd4-9d0e-2f7a3c1d9e11", "name": "local", "kind": "local"},
    "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:00:00Z",
    "spec": {}, "pools": [], "warnings": [],
}  # fmt: skip


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    # Time is the seam: the retries and their Idempotency-Key are what these tests check, and the
    # real backoff would only make them wait.
    monkeypatch.setattr(sdk_client, "retry_delay", lambda attempt, response: 0.0)


def test_a_post_whose_answer_was_lost_is_retried_with_the_same_idempotency_key() -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Idempotency-Key"))
        if len(seen) == 1:
            raise httpx.ReadError("connection reset")  # sent, answer lost
        if len(seen) == 2:
            return httpx.Response(503, headers={"Retry-After": "1"}, json={"error": {}})
        return httpx.Response(201, json=DETAIL)

    client = plinth.Plinth("http://plinth", "pk", transport=httpx.MockTransport(handler))
    created = client.endpoints.create("x", {})
    assert created.slug == "x"
    assert len(seen) == 3 and seen[0] is not None and len(set(seen)) == 1


def test_a_patch_is_not_sent_again_once_it_may_have_reached_the_server() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        raise httpx.ReadError("connection reset")

    client = plinth.Plinth("http://plinth", "pk", transport=httpx.MockTransport(handler))
    with pytest.raises(plinth.ConnectionFailed):
        client.endpoints.update("x", {}, base_revision=1)
    assert calls == ["PATCH"]


STATUS_TYPES = {
    401: plinth.AuthenticationFailed, 403: plinth.PermissionDenied, 404: plinth.NotFound,
    409: plinth.Conflict, 422: plinth.ValidationFailed, 429: plinth.RateLimited,
}  # fmt: skip

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)
api_bodies = st.fixed_dictionaries(
    {"error": st.fixed_dictionaries(
        {"code": st.text(max_size=10), "message": st.text(max_size=20)},
        optional={"fields": st.lists(st.fixed_dictionaries(
            {"field": st.text(max_size=10), "code": st.text(max_size=5),
             "message": st.text(max_size=10)},
            optional={"fix": st.none() | st.text(max_size=10)}), max_size=3)},
    )}
)  # fmt: skip


@given(status=st.integers(400, 599), body=api_bodies | json_values)
def test_every_error_answer_becomes_the_typed_exception_of_its_status(
    status: int, body: Any
) -> None:
    error = error_from_response(status, body)
    expected = STATUS_TYPES.get(status, plinth.ServerError if status >= 500 else plinth.PlinthError)
    assert type(error) is expected and error.status == status
    str(error)  # always printable
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and "fields" in detail:
        assert [f.field for f in error.fields] == [f["field"] for f in detail["fields"]]
