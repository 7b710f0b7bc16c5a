"""The API keys page as a developer uses it: a new key inside snippets for the endpoints it can
call, no role for inference keys, limits (and the priority and weight under overload) set at
creation and changed later, the last day's usage per key, and the playground's temporary keys
listed and revocable."""

from __future__ import annotations

import html
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from controlplane import services as platform
from controlplane.models import ApiKey, AuditEvent
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.traffic.models import UsageRecord
from deployments.traffic.views.keys import KEYS_PER_PAGE, PICKER_CHOICES
from tests.conftest import Cast

SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}


def _page(client: Client) -> str:
    return html.unescape(client.get("/keys/").content.decode())


def test_a_new_key_is_shown_inside_snippets_for_its_endpoint(
    alice: Client, endpoint: Deployment
) -> None:
    alice.post("/keys/", {"name": "app", "kind": "inference", "endpoints": [endpoint.pk]})
    page = _page(alice)
    key = ApiKey.objects.get(name="app")
    plaintext = page.split('id="created-key"')[1].split('value="')[1].split('"')[0]
    assert plaintext.startswith(key.prefix)
    assert 'data-copy="#created-key"' in page
    snippets = page.split('data-snippets-for="chat"')[1]
    assert f"Authorization: Bearer {plaintext}" in snippets  # curl
    assert f'api_key="{plaintext}"' in snippets  # openai-python
    assert f'apiKey: "{plaintext}"' in snippets  # openai-node
    assert "/endpoints/chat/v1" in snippets and "meta-llama/Llama-3.1-8B-Instruct" in snippets


def test_an_inference_key_ignores_a_role_and_management_keys_keep_theirs(
    alice: Client, cast: Cast
) -> None:
    alice.post("/keys/", {"name": "inf", "kind": "inference", "role": "admin"})
    alice.post("/keys/", {"name": "ops", "kind": "management", "role": "viewer"})
    assert ApiKey.objects.get(name="inf").role == "developer"
    assert ApiKey.objects.get(name="ops").role == "viewer"
    # The role field is for management keys: hidden while the form is on an inference key.
    form = _page(alice).split('id="key-form"')[1]
    role_field = form.split('data-for-kind="management"')[1].split(">")[0]
    assert "hidden" in role_field


def test_the_endpoint_picker_searches_on_the_server_and_keeps_ticked_ones(
    alice: Client, cast: Cast, endpoint: Deployment
) -> None:
    page = _page(alice)
    assert 'hx-get="/keys/endpoints/"' in page and 'hx-include="#endpoint-chosen"' in page
    assert f'type="checkbox" name="endpoints" value="{endpoint.pk}"' in page
    actor = cast.actor(cast.alice, cast.acme)
    for i in range(PICKER_CHOICES + 2):
        services.create_deployment(actor, slug=f"extra-{i:02}", name=f"Extra {i}", spec=SPEC)
    # The page offers a few; the rest are a search away.
    offered = _page(alice).split('id="endpoint-choices"')[1].split("</ul>")[0]
    assert offered.count('name="endpoints"') == PICKER_CHOICES
    found = html.unescape(alice.get("/keys/endpoints/", {"endpoint_q": "extra-2"}).content.decode())
    assert "extra-20" in found and "extra-21" in found and "extra-02" not in found
    # A ticked endpoint, sent along, is left out of the results: it stays in the form apart.
    found = html.unescape(
        alice.get(
            "/keys/endpoints/", {"endpoint_q": "chat", "endpoints": str(endpoint.pk)}
        ).content.decode()
    )
    assert str(endpoint.pk) not in found and "No endpoint matches" in found


def test_a_refused_key_keeps_its_ticked_endpoints(alice: Client, endpoint: Deployment) -> None:
    refused = alice.post(
        "/keys/", {"name": "x", "kind": "inference", "endpoints": [endpoint.pk], "tpm": "lots"}
    )
    assert refused.status_code == 422
    kept = refused.content.decode().split('id="endpoint-chosen"')[1].split("</ul>")[0]
    assert f'value="{endpoint.pk}" checked' in kept


def test_the_key_list_is_paginated_and_searched_by_name_or_prefix(
    alice: Client, cast: Cast
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    made = [
        platform.create_api_key(actor, name=f"key-{i:03}", kind="inference").api_key
        for i in range(KEYS_PER_PAGE + 3)
    ]
    first = _page(alice)
    assert first.count("<tr data-key=") == KEYS_PER_PAGE and 'rel="next"' in first
    second = html.unescape(alice.get("/keys/", {"page": "2"}).content.decode())
    assert second.count("<tr data-key=") == 3 and f'data-key="{made[0].prefix}"' in second
    by_name = html.unescape(alice.get("/keys/", {"q": "key-007"}).content.decode())
    assert by_name.count("<tr data-key=") == 1 and f'data-key="{made[7].prefix}"' in by_name
    by_prefix = html.unescape(alice.get("/keys/", {"q": made[9].prefix}).content.decode())
    assert f'data-key="{made[9].prefix}"' in by_prefix
    assert b"No key matches" in alice.get("/keys/", {"q": "nothing like it"}).content


def test_limits_are_set_at_creation_and_changed_from_the_list(alice: Client, cast: Cast) -> None:
    alice.post("/keys/", {"name": "capped", "kind": "inference", "rpm": "30", "tpm": "9000"})
    key = ApiKey.objects.get(name="capped")
    assert (key.requests_per_minute, key.tokens_per_minute) == (30, 9000)
    response = alice.post(f"/keys/{key.pk}/limits/", {"rpm": "120", "tpm": ""}, follow=True)
    assert b"Limits of capped" in response.content
    key.refresh_from_db()
    assert (key.requests_per_minute, key.tokens_per_minute) == (120, None)
    assert AuditEvent.objects.filter(action="api_key.limits").count() == 1
    row = _page(alice).split(f'data-key="{key.prefix}"')[1].split("</tr>")[0]
    assert "120 req/min" in row and "no tok/min" in row


def test_priority_and_weight_are_set_at_creation_and_changed_from_the_list(
    alice: Client, cast: Cast
) -> None:
    form = {"name": "nightly", "kind": "inference", "priority": "batch", "weight": "4"}
    alice.post("/keys/", form)
    key = ApiKey.objects.get(name="nightly")
    assert (key.priority, key.weight) == ("batch", 4)
    row = _page(alice).split(f'data-key="{key.prefix}"')[1].split("</tr>")[0]
    assert "batch, weight 4" in row
    alice.post(f"/keys/{key.pk}/limits/", {"rpm": "", "tpm": "", "priority": "critical"})
    key.refresh_from_db()
    assert (key.priority, key.weight) == ("critical", 4)  # the weight left empty: kept


def test_a_bad_priority_or_weight_is_refused_naming_the_field(alice: Client, cast: Cast) -> None:
    refused = alice.post("/keys/", {"name": "x", "kind": "inference", "weight": "0"})
    assert refused.status_code == 422 and b"weight must be a whole number" in refused.content
    refused = alice.post("/keys/", {"name": "x", "kind": "inference", "priority": "urgent"})
    assert refused.status_code == 422 and b"priority must be one of" in refused.content
    created = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    response = alice.post(f"/keys/{created.api_key.pk}/limits/", {"weight": "much"})
    assert response.status_code == 422 and b"weight must be a whole number" in response.content
    assert not ApiKey.objects.filter(name="x").exists()


def test_a_bad_limit_is_refused_naming_the_field(alice: Client, cast: Cast) -> None:
    created = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    response = alice.post(f"/keys/{created.api_key.pk}/limits/", {"rpm": "-5"})
    assert response.status_code == 422
    assert b"requests per minute: enter a whole number" in response.content
    refused = alice.post("/keys/", {"name": "x", "kind": "inference", "tpm": "lots"})
    assert refused.status_code == 422 and b"tokens per minute" in refused.content
    created.api_key.refresh_from_db()
    assert created.api_key.requests_per_minute is None


def test_management_keys_have_no_rate_limits(alice: Client, cast: Cast) -> None:
    created = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="ops", kind="management", role="viewer"
    )
    response = alice.post(f"/keys/{created.api_key.pk}/limits/", {"rpm": "5"})
    assert response.status_code == 422 and b"only inference keys" in response.content


def test_another_orgs_key_limits_cannot_be_changed(bob: Client, cast: Cast) -> None:
    created = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    assert bob.post(f"/keys/{created.api_key.pk}/limits/", {"rpm": "1"}).status_code == 404


def test_each_key_shows_its_last_days_usage(
    alice: Client, cast: Cast, endpoint: Deployment
) -> None:
    key = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    now = timezone.now().replace(second=0, microsecond=0)
    for minute, requests in (
        (now, 3),
        (now - timedelta(minutes=5), 2),
        (now - timedelta(days=2), 50),
    ):
        UsageRecord.objects.create(
            organization=cast.acme, api_key=key.api_key, deployment_id=endpoint.pk,
            deployment_slug="chat", minute=minute, requests=requests,
            prompt_tokens=100, completion_tokens=20,
        )  # fmt: skip
    row = _page(alice).split(f'data-key="{key.api_key.prefix}"')[1].split("</tr>")[0]
    assert "5 requests" in row and "240 tokens" in row  # the two-day-old minute is left out


def test_playground_keys_are_listed_and_revocable(alice: Client, endpoint: Deployment) -> None:
    alice.post("/endpoints/chat/playground/key/", HTTP_HX_REQUEST="true")
    key = ApiKey.objects.get(is_temporary=True)
    page = _page(alice)
    assert "Playground keys" in page
    listed = page.split("Playground keys")[-1]
    assert f'data-key="{key.prefix}"' in listed
    alice.post(f"/keys/{key.pk}/revoke/")
    key.refresh_from_db()
    assert key.revoked_at is not None
    # Revoked (or expired) playground keys leave the list.
    assert f'data-key="{key.prefix}"' not in _page(alice)


def test_odd_searches_and_pages_answer_a_page(alice: Client, endpoint: Deployment) -> None:
    for query in ({"q": "%_\\"}, {"page": "x"}, {"page": "999"}, {"playground_page": "-1"}):
        assert alice.get("/keys/", query).status_code == 200, query
    for query in ({"endpoint_q": "%_"}, {"endpoints": "not-a-uuid"}):
        assert alice.get("/keys/endpoints/", query).status_code == 200, query
    assert b"No endpoint matches" in alice.get("/keys/endpoints/", {"endpoint_q": "%"}).content
