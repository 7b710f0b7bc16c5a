"""The create/edit wizard: live validation in place, memory fit and cost, saving a revision,
and a clear conflict when someone else saved first."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import QueryDict
from django.test import Client
from hypothesis import given, settings
from hypothesis import strategies as st

from deployments.endpoints import forms, services
from deployments.endpoints.models import Deployment
from runtime.spec import PLINTH_ROUTING
from tests.conftest import Cast

HTMX = {"HTTP_HX_REQUEST": "true"}
SPEC_GPU = {"gpu": "H100-SXM"}
FORM = {
    "model.source": "meta-llama/Llama-3.1-8B-Instruct",
    "hardware.gpu": "H100-SXM",
    "parallelism.tp": "1",
    "autoscaling.min_replicas": "1",
    "autoscaling.max_replicas": "3",
}


def _form(**changes: str) -> dict[str, Any]:
    return {**FORM, **{k.replace("__", "."): v for k, v in changes.items()}}


def test_the_live_check_shows_fit_cost_and_no_errors(alice: Client, cast: Cast) -> None:
    response = alice.post("/endpoints/validate/", _form(), **HTMX)
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="estimate"' in body and "Fits" in body
    assert "$2.49 \N{EN DASH} $7.47" in body  # one H100 at min, three at max replicas
    assert 'id="issues-f-parallelism-tp" hx-swap-oob="true"></div>' in body


def test_an_indivisible_tp_is_shown_next_to_its_field(alice: Client, cast: Cast) -> None:
    body = alice.post("/endpoints/validate/", _form(parallelism__tp="3"), **HTMX).content.decode()
    slot = body.split('id="issues-f-parallelism-tp"')[1].split("</div>")[0]
    assert "TP 3 does not divide the 32 attention heads" in slot and "Fix: use TP 2, 4 or 8" in slot
    assert "1 setting to fix before saving" in body


def test_text_in_a_number_field_is_a_field_error(alice: Client, cast: Cast) -> None:
    body = alice.post("/endpoints/validate/", _form(parallelism__tp="two"), **HTMX).content.decode()
    slot = body.split('id="issues-f-parallelism-tp"')[1].split("</div>")[0]
    assert "enter a whole number" in slot


def test_a_model_that_does_not_fit_says_so(alice: Client, cast: Cast) -> None:
    form = _form(model__source="meta-llama/Llama-3.1-405B-Instruct")
    body = alice.post("/endpoints/validate/", form, **HTMX).content.decode()
    assert "Does not fit" in body


def test_a_custom_architecture_is_estimated(alice: Client, cast: Cast) -> None:
    arch = {
        "model.custom_architecture": ["false", "true"],
        "model.architecture.num_layers": "24",
        "model.architecture.hidden_size": "2048",
        "model.architecture.num_attention_heads": "16",
        "model.architecture.num_kv_heads": "8",
        "model.architecture.head_dim": "128",
        "model.architecture.vocab_size": "32000",
        "model.architecture.params_b": "1.5",
        "model.architecture.max_context": "8192",
    }
    form = {**_form(model__source="acme/private-model"), **arch}
    body = alice.post("/endpoints/validate/", form, **HTMX).content.decode()
    assert "Fits" in body and "Unknown architecture" not in body


def test_creating_an_endpoint(alice: Client, cast: Cast) -> None:
    response = alice.post("/endpoints/new/", {**_form(), "slug": "chat", "name": "Chat"})
    assert response.status_code == 302
    assert response["Location"] == "/endpoints/chat/"
    endpoint = Deployment.objects.get(slug="chat")
    assert endpoint.organization == cast.acme
    assert endpoint.target_revision.spec["autoscaling"]["max_replicas"] == 3


def test_routing_knobs_posted_in_the_wizard_are_stored(alice: Client, cast: Cast) -> None:
    page = alice.get("/endpoints/new/").content.decode()
    assert f'placeholder="default {PLINTH_ROUTING.balance_abs_threshold}"' in page
    form = _form(
        routing__warmup_seconds="30",
        routing__overload_protection="true",
        routing__balance_rel_threshold="",
    )
    response = alice.post("/endpoints/new/", {**form, "slug": "chat", "name": "Chat"})
    assert response.status_code == 302
    revision = Deployment.objects.get(slug="chat").target_revision
    assert revision is not None
    routing = revision.spec["routing"]
    assert routing["warmup_seconds"] == 30
    assert routing["overload_protection"] is True
    assert routing["balance_rel_threshold"] is None  # empty: Plinth's default at launch


def test_a_warm_pool_posted_in_the_wizard_is_stored_and_too_many_refused(
    alice: Client, cast: Cast
) -> None:
    """Issue 29: autoscaling.warm_replicas on the settings form; above max_replicas it is a
    422 with the message beside the field, nothing saved."""
    page = alice.get("/endpoints/new/").content.decode()
    assert 'name="autoscaling.warm_replicas"' in page
    refused = alice.post("/endpoints/new/", {**_form(autoscaling__warm_replicas="4"), "slug": "w"})
    assert refused.status_code == 422
    assert b"warm_replicas 4 is above max_replicas 3" in refused.content
    assert not Deployment.objects.exists()
    stored = alice.post("/endpoints/new/", {**_form(autoscaling__warm_replicas="1"), "slug": "w"})
    assert stored.status_code == 302
    revision = Deployment.objects.get(slug="w").target_revision
    assert revision is not None and revision.spec["autoscaling"]["warm_replicas"] == 1


def test_invalid_settings_are_refused_field_by_field(alice: Client, cast: Cast) -> None:
    response = alice.post("/endpoints/new/", {**_form(parallelism__tp="3"), "slug": "chat"})
    assert response.status_code == 422
    assert b"does not divide the 32 attention heads" in response.content
    assert b'<option value="3" selected>' in response.content  # the value stays to be fixed
    assert not Deployment.objects.exists()


def test_a_taken_slug_is_shown_on_the_slug_field(
    alice: Client, cast: Cast, endpoint: Deployment
) -> None:
    response = alice.post("/endpoints/new/", {**_form(), "slug": "chat"})
    assert response.status_code == 422
    slug_field = response.content.decode().split('id="f-slug"')[1].split("</div>")[0]
    assert "is taken" in slug_field


def test_editing_batching_creates_a_revision(alice: Client, endpoint: Deployment) -> None:
    page = alice.get("/endpoints/chat/settings/").content.decode()
    assert 'name="base_revision" value="1"' in page
    form = {**_form(batching__max_running_requests="64"), "base_revision": "1", "message": "more"}
    response = alice.post("/endpoints/chat/settings/", form)
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.target_revision.number == 2
    assert endpoint.target_revision.spec["batching"]["max_running_requests"] == 64
    assert endpoint.target_revision.message == "more"


def test_a_stale_edit_shows_who_saved_first(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    dave = cast.actor(cast.dave, cast.acme)
    changed = {**endpoint.target_revision.spec, "batching": {"max_running_requests": 8}}
    services.update_settings(dave, endpoint.pk, spec=changed, base_revision=1)
    form = {**_form(batching__max_running_requests="64"), "base_revision": "1"}
    response = alice.post("/endpoints/chat/settings/", form)
    assert response.status_code == 409
    body = response.content.decode()
    assert "Someone saved revision 2 while you were editing" in body
    assert "/endpoints/chat/revisions/diff/?a=1&b=2" in body
    endpoint.refresh_from_db()
    assert endpoint.target_revision.number == 2


def test_the_edit_page_saves_after_a_canary_and_names_a_running_one(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    from deployments.experiments.canary import services as canary_services
    from tests.experiments.canary.helpers import mark_serving

    actor = cast.actor(cast.alice, cast.acme)
    mark_serving(endpoint)
    fp8 = {**endpoint.target_revision.spec, "quantization": {"method": "fp8"}}
    canary_services.start_canary(actor, endpoint.pk, spec=fp8, weight=10)
    form = {**_form(batching__max_running_requests="64"), "base_revision": "1"}
    refused = alice.post("/endpoints/chat/settings/", form)
    assert refused.status_code == 409
    body = refused.content.decode()
    # Nobody saved settings: the canary is in the way, and the card says so.
    assert "has a canary running" in body and "Someone saved" not in body
    canary_services.abort_canary(actor, endpoint.pk)
    page = alice.get("/endpoints/chat/settings/").content.decode()
    assert 'name="base_revision" value="1"' in page  # the settings shown are revision 1's
    assert alice.post("/endpoints/chat/settings/", form).status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.target_revision.number == 3


def test_the_edit_page_validates_against_the_endpoints_settings(
    alice: Client, endpoint: Deployment
) -> None:
    body = alice.post(
        "/endpoints/validate/", {**_form(parallelism__tp="3"), "endpoint": "chat"}, **HTMX
    ).content.decode()
    assert "does not divide" in body


def test_validating_against_another_orgs_endpoint_is_missing(
    bob: Client, endpoint: Deployment
) -> None:
    response = bob.post("/endpoints/validate/", {**_form(), "endpoint": "chat"}, **HTMX)
    assert response.status_code == 404


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("parallelism.tp", "99999999999999999999"),
        ("parallelism.tp", "-1"),
        ("parallelism.tp", "1.5"),
        ("batching.mem_fraction_static", "nan"),
        ("hardware.price_per_gpu_hour", "inf"),
        ("model.context_length", "0"),
        ("hardware.gpu", "TPUv9"),
        ("speculator.algorithm", "MAGIC"),
        ("model.source", ""),
        ("batching.chunked_prefill_size", "0"),
        ("quantization.method", "nvfp4"),
        ("model.custom_architecture", "true"),
    ],
)
def test_bad_values_are_field_errors_never_server_errors(
    alice: Client, cast: Cast, field: str, value: str
) -> None:
    checked = alice.post("/endpoints/validate/", {**FORM, field: value}, **HTMX)
    assert checked.status_code == 200
    assert b"issue-error" in checked.content
    saved = alice.post("/endpoints/new/", {**FORM, field: value, "slug": "fz"})
    assert saved.status_code == 422
    assert not Deployment.objects.exists()


# The page posts every architecture input (hidden while the box is unticked) and the toggle's
# hidden "false"; a refused save must re-render the box as it was posted, not as "ticked".
ARCH_INPUTS = {f.path: "" for f in forms.ALL_FIELDS if f.path.startswith(forms.ARCH_PREFIX)}
UNTICKED = {**ARCH_INPUTS, forms.CUSTOM_ARCH_TOGGLE: "false"}


def _arch_toggle(body: str) -> str:
    return body.split('id="arch-toggle"')[1].split(">")[0]


def test_a_refused_create_keeps_the_catalogue_architecture(
    alice: Client, cast: Cast, endpoint: Deployment
) -> None:
    response = alice.post("/endpoints/new/", {**_form(), **UNTICKED, "slug": "chat"})
    assert response.status_code == 422  # the slug is taken
    body = response.content.decode()
    assert "checked" not in _arch_toggle(body)
    assert 'data-field="model.architecture' not in body
    assert "1 setting to fix" in body  # the slug, and nothing else


def test_a_conflicting_edit_keeps_the_catalogue_architecture(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    dave = cast.actor(cast.dave, cast.acme)
    changed = {**endpoint.target_revision.spec, "batching": {"max_running_requests": 8}}
    services.update_settings(dave, endpoint.pk, spec=changed, base_revision=1)
    form = {**_form(), **UNTICKED, "base_revision": "1"}
    response = alice.post("/endpoints/chat/settings/", form)
    assert response.status_code == 409
    assert "checked" not in _arch_toggle(response.content.decode())


def test_a_refused_custom_architecture_stays_ticked(alice: Client, cast: Cast) -> None:
    form = {**_form(model__source="acme/private"), **ARCH_INPUTS, "slug": "Bad Slug"}
    form[forms.CUSTOM_ARCH_TOGGLE] = ["false", "true"]
    response = alice.post("/endpoints/new/", form)
    assert response.status_code == 422
    body = response.content.decode()
    assert "checked" in _arch_toggle(body)
    assert 'data-field="model.architecture.num_layers"' in body


def test_the_edit_page_of_a_custom_architecture_is_ticked(alice: Client, cast: Cast) -> None:
    arch = {
        "num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16, "num_kv_heads": 8,
        "head_dim": 128, "vocab_size": 32000, "params_b": 1.5, "max_context": 8192,
    }  # fmt: skip
    spec = {"model": {"source": "acme/private", "architecture": arch}, "hardware": SPEC_GPU}
    services.create_deployment(cast.actor(cast.alice, cast.acme), slug="own", name="o", spec=spec)
    assert "checked" in _arch_toggle(alice.get("/endpoints/own/settings/").content.decode())
    assert "checked" not in _arch_toggle(alice.get("/endpoints/new/").content.decode())


@settings(max_examples=60, deadline=None)
@given(
    ticked=st.booleans(),
    typed=st.dictionaries(
        st.sampled_from(sorted(ARCH_INPUTS)), st.sampled_from(["", "0", "24", "x", " "])
    ),
)
def test_the_toggle_alone_decides_a_custom_architecture(
    ticked: bool, typed: dict[str, str]
) -> None:
    post = QueryDict(mutable=True)
    post.update({**FORM, **ARCH_INPUTS, **typed})
    post.setlist(forms.CUSTOM_ARCH_TOGGLE, ["false", "true"] if ticked else ["false"])
    parsed = forms.parse_spec(post)
    assert forms.uses_custom_architecture(forms.posted_values(post, parsed)) is ticked
    assert ("architecture" in parsed.data.get("model", {})) is ticked


def test_hicache_tiers_from_the_wizard_are_stored_and_bad_ones_shown_on_their_field(
    alice: Client, cast: Cast
) -> None:
    """Issue 29: the KV cache tiers section. Left empty, no tier is stored; a storage tier with
    no host tier is refused on its field; a host tier posted is stored."""
    response = alice.post("/endpoints/new/", {**_form(), "slug": "plain", "name": "Plain"})
    assert response.status_code == 302
    plain = Deployment.objects.get(slug="plain").target_revision
    assert plain is not None and plain.spec["kv_cache"]["tiers"] == {"host": None, "storage": None}
    storage_only = _form(
        kv_cache__tiers__storage__backend="file",
        kv_cache__tiers__storage__node_path="/mnt/nvme/hicache",
    )
    response = alice.post("/endpoints/new/", {**storage_only, "slug": "tiers"})
    assert response.status_code == 422
    field = response.content.decode().split('id="f-kv-cache-tiers-storage-backend"')[0]
    assert "storage tier sits behind the host tier" in response.content.decode(), field[-200:]
    host = _form(kv_cache__tiers__host__ratio="3", kv_cache__tiers__host__write_policy="write_back")
    response = alice.post("/endpoints/new/", {**host, "slug": "tiers", "name": "Tiers"})
    assert response.status_code == 302, response.content.decode()[-2000:]
    revision = Deployment.objects.get(slug="tiers").target_revision
    assert revision is not None
    assert revision.spec["kv_cache"]["tiers"]["host"]["ratio"] == 3.0
    assert revision.spec["kv_cache"]["tiers"]["host"]["write_policy"] == "write_back"
