"""The API keys page as a developer uses it: a new key inside snippets for the endpoints it can
call, no role for inference keys, limits set at creation and changed later, the last day's usage
per key, and the playground's temporary keys listed and revocable."""

from __future__ import annotations

import html
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from controlplane import services as platform
from controlplane.models import ApiKey, AuditEvent
from deployments.models import Deployment, UsageRecord
from tests.conftest import Cast


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


def test_the_endpoint_picker_is_a_searchable_list_of_checkboxes(
    alice: Client, endpoint: Deployment
) -> None:
    page = _page(alice)
    assert 'data-filter-list="#endpoint-choices"' in page
    assert f'type="checkbox" name="endpoints" value="{endpoint.pk}"' in page
    assert "<select" not in page.split('id="endpoint-choices"')[1].split("</ul>")[0]


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
