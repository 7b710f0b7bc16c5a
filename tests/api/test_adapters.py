"""An endpoint's LoRA adapters through the API (issue 30 item 1): each add or remove is a new
revision of the endpoint's settings, refused with the field named when it is wrong; the list
carries each adapter's traffic; inference keys take an adapter allow-list. The end-to-end run
on real processes is tests/endpoints/test_lora_end_to_end.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from controlplane import services as platform
from deployments.endpoints.models import Deployment
from deployments.traffic.models import UsageRecord
from tests.api.conftest import Clients, error_of
from tests.conftest import Cast

LEGAL = {"name": "legal", "source": "acme/legal-lora", "rank": 8}


@pytest.mark.django_db
def test_adding_and_removing_an_adapter_makes_a_revision_each(
    api: Clients, endpoint: Deployment
) -> None:
    added = api.dave.post(f"deployments/{endpoint.pk}/adapters", LEGAL)
    assert added.status_code == 201, added.content
    body = added.json()
    assert body["target_revision"] == 2 and body["serving_revision"] is None
    [adapter] = body["adapters"]
    assert (adapter["name"], adapter["rank"], adapter["serving"]) == ("legal", 8, False)
    revision = api.carol.get(f"deployments/{endpoint.pk}/revisions/2").json()
    assert revision["message"] == "add adapter legal"
    assert revision["spec"]["lora"]["adapters"][0]["source"] == "acme/legal-lora"

    removed = api.dave.delete(f"deployments/{endpoint.slug}/adapters/legal")
    assert removed.status_code == 200 and removed.json()["adapters"] == []
    assert removed.json()["target_revision"] == 3


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({**LEGAL, "rank": 0}, 422, "rank"),
        ({**LEGAL, "name": "a:b"}, 422, "name"),
        ({**LEGAL, "source": ""}, 422, "source"),
    ],
)
def test_a_wrong_adapter_is_refused_naming_its_field(
    api: Clients, endpoint: Deployment, body: dict[str, object], status: int, field: str
) -> None:
    response = api.dave.post(f"deployments/{endpoint.pk}/adapters", body)
    assert response.status_code == status, response.content
    assert [f["field"] for f in error_of(response)["fields"]] == [field]


@pytest.mark.django_db
def test_a_second_adapter_of_one_name_conflicts_and_an_unknown_one_is_not_found(
    api: Clients, endpoint: Deployment
) -> None:
    assert api.dave.post(f"deployments/{endpoint.pk}/adapters", LEGAL).status_code == 201
    again = api.dave.post(f"deployments/{endpoint.pk}/adapters", LEGAL)
    assert again.status_code == 409 and error_of(again)["fields"][0]["field"] == "name"
    assert api.dave.delete(f"deployments/{endpoint.pk}/adapters/nope").status_code == 404
    assert api.carol.post(f"deployments/{endpoint.pk}/adapters", LEGAL).status_code == 403


@pytest.mark.django_db
def test_the_list_counts_each_adapters_and_the_base_models_traffic(
    api: Clients, endpoint: Deployment, cast: Cast
) -> None:
    api.dave.post(f"deployments/{endpoint.pk}/adapters", LEGAL)
    key = platform.create_api_key(cast.actor(cast.dave, cast.acme), name="k", kind="inference")
    now = timezone.now()
    for adapter, ago, tokens in (("legal", 5, 100), ("legal", 300, 50), ("", 10, 7)):
        UsageRecord.objects.create(
            organization=cast.acme, api_key=key.api_key, deployment_id=endpoint.pk,
            deployment_slug="chat", adapter=adapter, minute=now - timedelta(minutes=ago),
            requests=1, prompt_tokens=tokens,
        )  # fmt: skip
    body = api.carol.get(f"deployments/{endpoint.pk}/adapters").json()
    [legal] = body["adapters"]
    assert (legal["requests_hour"], legal["tokens_hour"]) == (1, 100)
    assert (legal["requests_day"], legal["tokens_day"]) == (2, 150)
    assert body["base"]["requests_day"] == 1
    assert api.bob.get(f"deployments/{endpoint.pk}/adapters").status_code == 404


@pytest.mark.django_db
def test_inference_keys_take_an_adapter_allow_list(api: Clients) -> None:
    made = api.dave.post(
        "api-keys", {"name": "legal team", "kind": "inference", "allowed_adapters": ["legal"]}
    )
    assert made.status_code == 201 and made.json()["allowed_adapters"] == ["legal"]
    for kind, names in (("inference", ["a:b"]), ("management", ["legal"])):
        refused = api.alice.post("api-keys", {"name": "x", "kind": kind, "allowed_adapters": names})
        assert refused.status_code == 422
        assert error_of(refused)["fields"][0]["field"] == "allowed_adapters"


@pytest.mark.django_db
def test_the_endpoint_page_lists_adapters_and_adds_one_by_htmx(
    client: Client, cast: Cast, endpoint: Deployment
) -> None:
    client.force_login(cast.dave)
    assert 'id="adapters"' in client.get("/endpoints/chat/").content.decode()
    form = {"name": "legal", "source": "acme/legal-lora", "rank": "8"}
    card = client.post("/endpoints/chat/adapters/", form, HTTP_HX_REQUEST="true")
    assert card.status_code == 200 and "legal" in card.content.decode()
    wrong = client.post("/endpoints/chat/adapters/", {**form, "rank": "x"}, HTTP_HX_REQUEST="true")
    assert wrong.status_code == 422 and "whole number" in wrong.content.decode()
    gone = client.post("/endpoints/chat/adapters/legal/remove/", HTTP_HX_REQUEST="true")
    assert gone.status_code == 200 and "acme/legal-lora" not in gone.content.decode()
