"""Who may call what: inference keys, endpoint scopes, organizations, revocation, deletion."""

from __future__ import annotations

import httpx
import pytest

from controlplane import services as platform
from deployments.endpoints import services as deployment_services
from tests.gateway.conftest import (
    create_endpoint,
    inference_key,
    mark_serving,
    wait_routable,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
BODY = {"model": "sim/llama-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def chat(gateway, slug: str, key: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{gateway.base_url(slug)}/chat/completions", json=BODY, headers=headers)


@pytest.fixture
def two_endpoints(cast, sim_cluster, gateway):
    a, b = create_endpoint(cast, "alpha"), create_endpoint(cast, "beta")
    mark_serving(a, sim_cluster.url)
    mark_serving(b, sim_cluster.url)
    return a, b


def test_a_key_scoped_to_one_endpoint_is_refused_on_another(cast, gateway, two_endpoints):
    alpha, _beta = two_endpoints
    key = inference_key(cast, allowed_deployment_ids=[alpha.pk])
    wait_routable(gateway, "alpha", key)

    assert chat(gateway, "alpha", key).status_code == 200
    refused = chat(gateway, "beta", key)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "endpoint_not_allowed"
    assert refused.headers["x-request-id"]


def test_another_organizations_endpoint_looks_missing(cast, sim_cluster, gateway, two_endpoints):
    globex_key = inference_key(cast, org="globex")
    mark_serving(create_endpoint(cast, "globex-own", org="globex"), sim_cluster.url)
    wait_until(lambda: chat(gateway, "alpha", globex_key).status_code == 404, "key loaded", 10)

    answer = chat(gateway, "alpha", globex_key)
    assert answer.json()["error"] == {
        "message": "no endpoint named 'alpha'",
        "type": "invalid_request_error",
        "param": None,
        "code": "endpoint_not_found",
    }
    assert chat(gateway, "no-such-endpoint", globex_key).status_code == 404


def test_requests_without_a_valid_inference_key_are_unauthorized(cast, gateway, two_endpoints):
    management = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="ops", kind="management"
    ).plaintext
    for key in (None, "pli_000000000000_not-a-real-key", management):
        answer = chat(gateway, "alpha", key)
        assert answer.status_code == 401, key
        assert answer.json()["error"]["code"] == "invalid_api_key"


def test_a_revoked_key_stops_working_within_two_seconds(cast, gateway, two_endpoints):
    created = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="soon revoked", kind="inference"
    )
    wait_routable(gateway, "alpha", created.plaintext)

    platform.revoke_api_key(cast.actor(cast.alice, cast.acme), key_id=created.api_key.pk)
    wait_until(lambda: chat(gateway, "alpha", created.plaintext).status_code == 401, "revoked", 2)


def test_a_deleted_endpoint_stops_answering_within_two_seconds(cast, gateway, two_endpoints):
    key = inference_key(cast)
    wait_routable(gateway, "beta", key)

    deployment_services.delete_deployment(cast.actor(cast.alice, cast.acme), "beta")
    wait_until(lambda: chat(gateway, "beta", key).status_code == 404, "deleted", 2)
    assert chat(gateway, "alpha", key).status_code == 200
