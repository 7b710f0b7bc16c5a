"""Prefill/decode pools in the console and the API: the wizard shows and edits them, and the
status card and the endpoint's detail say how each pool stands."""

from __future__ import annotations

from typing import Any

from django.test import Client

from controlplane import services as platform
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.conftest import Cast
from tests.console.conftest import SPEC

SPLIT = {
    **SPEC,
    "disaggregation": {"enabled": True, "prefill": {"replicas": 1}, "decode": {"replicas": 2}},
}
FORM = {
    "model.source": "meta-llama/Llama-3.1-8B-Instruct",
    "hardware.gpu": "H100-SXM",
    "parallelism.tp": "1",
    "autoscaling.min_replicas": "1",
    "autoscaling.max_replicas": "1",
}


def test_the_wizard_has_a_pools_section(alice: Client, cast: Cast) -> None:
    body = alice.get("/endpoints/new/").content.decode()
    section = body.split('id="section-disaggregation"')[1].split("</fieldset>")[0]
    for name in (
        "disaggregation.enabled",
        "disaggregation.prefill.replicas",
        "disaggregation.decode.replicas",
        "disaggregation.prefill.tp",
        "disaggregation.transfer_backend",
    ):
        assert f'name="{name}"' in section, name


def test_pools_are_created_and_edited_from_the_form(alice: Client, cast: Cast) -> None:
    form = {
        **FORM,
        "disaggregation.enabled": ["false", "true"],
        "disaggregation.prefill.replicas": "1",
        "disaggregation.decode.replicas": "2",
        "slug": "split",
    }
    response = alice.post("/endpoints/new/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    endpoint = Deployment.objects.get(slug="split")
    split = endpoint.target_revision.spec["disaggregation"]
    assert split["enabled"] is True
    assert split["prefill"]["replicas"] == 1 and split["decode"]["replicas"] == 2
    page = alice.get("/endpoints/split/settings/").content.decode()
    field = page.split('id="f-disaggregation-decode-replicas"')[1].split(">")[0]
    assert 'value="2"' in field
    edit = {**form, "disaggregation.decode.replicas": "3", "base_revision": "1"}
    assert alice.post("/endpoints/split/settings/", edit).status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.target_revision.spec["disaggregation"]["decode"]["replicas"] == 3


def _observed(endpoint: Deployment, decode_ready: list[bool]) -> None:
    """What reconcile records after observing the pools (its own writer is tested elsewhere)."""
    facts: list[dict[str, Any]] = [
        {"name": "split-prefill-a", "role": "prefill", "revision": 1, "ready": True}
    ]
    facts += [
        {"name": f"split-decode-{i}", "role": "decode", "revision": 1, "ready": ready}
        for i, ready in enumerate(decode_ready)
    ]
    Deployment.objects.filter(pk=endpoint.pk).update(
        applied_revision=endpoint.target_revision, replica_facts=facts
    )


def test_the_status_card_and_the_api_show_each_pool(alice: Client, cast: Cast) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    endpoint = services.create_deployment(actor, slug="split", name="Split", spec=SPLIT)
    _observed(endpoint, decode_ready=[True, False])
    card = alice.get("/endpoints/split/").content.decode()
    assert 'id="pool-prefill">1 / 1 ready' in card
    decode = card.split('id="pool-decode">')[1].split("</dd>")[0]
    assert decode.startswith("1 / 2 ready") and "(2 running)" in decode
    key = platform.create_api_key(actor, name="ops", kind="management", role="admin").plaintext
    detail = (
        Client()
        .get(f"/api/v1/deployments/{endpoint.pk}", HTTP_AUTHORIZATION=f"Bearer {key}")
        .json()
    )
    assert detail["pools"] == [
        {"role": "prefill", "desired": 1, "ready": 1, "present": 1},
        {"role": "decode", "desired": 2, "ready": 1, "present": 2},
    ]


def test_an_endpoint_without_pools_shows_replicas(alice: Client, endpoint: Deployment) -> None:
    card = alice.get("/endpoints/chat/").content.decode()
    assert "Replicas ready" in card and 'id="pool-' not in card
