"""/api/v1/deployments: create, list, get, edit, delete, scale, stop, start."""

from __future__ import annotations

import pytest

from controlplane.models import AuditEvent
from deployments.autoscaling import services as autoscaler
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment, Revision
from tests.api.conftest import SPEC, Clients, error_of, fields_of, spec_with
from tests.conftest import Cast


def create(client, slug: str = "chat", **extra):  # type: ignore[no-untyped-def]
    return client.post("deployments", {"slug": slug, "name": "Chat", "spec": SPEC, **extra})


def test_a_developer_creates_an_endpoint_at_revision_one(api: Clients) -> None:
    response = create(api.dave)
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["slug"] == "chat" and body["name"] == "Chat"
    assert body["status"] == "pending" and body["settled"] is False
    assert body["target_revision"] == 1 and body["current_revision"] is None
    assert body["desired_replicas"] == 1 and body["cluster"]["kind"] == "local"
    assert body["spec"]["hardware"]["gpu"] == "H100-SXM"
    assert body["spec"]["parallelism"]["tp"] == 1  # stored with every default filled in
    assert body["url"].endswith("/endpoints/chat/v1")
    revision = Revision.objects.get(deployment_id=body["id"])
    assert revision.number == 1 and revision.author_label.startswith("key:")
    assert AuditEvent.objects.filter(action="deployment.create", target_id=body["id"]).exists()


def test_warnings_are_stored_with_the_revision(api: Clients) -> None:
    # Half of the GPU for static memory fits an 8B model, but leaves room for few full-context
    # requests: a warning, not an error.
    spec = spec_with(batching={"mem_fraction_static": 0.5})
    created = api.dave.post("deployments", {"slug": "warned", "spec": spec})
    assert created.status_code == 201
    [warning] = created.json()["warnings"]
    assert warning["field"] == "spec.model.context_length"
    assert warning["code"] == "memory_low_concurrency" and warning["message"]
    assert api.dave.get("deployments/warned/revisions/1").json()["warnings"] == [warning]


def test_invalid_settings_are_refused_field_by_field_before_anything_is_saved(
    api: Clients,
) -> None:
    response = api.dave.post(
        "deployments", {"slug": "chat", "spec": spec_with(parallelism={"tp": 3})}
    )
    assert response.status_code == 422
    error = error_of(response)
    assert error["code"] == "invalid_spec"
    assert error["fields"][0]["field"] == "spec.parallelism.tp"
    assert error["fields"][0]["fix"]  # says what to use instead
    assert not Deployment.objects.exists()


def test_schema_errors_inside_the_spec_name_the_spec_field(api: Clients) -> None:
    spec = spec_with(parallelism={"tp": "2"}, routing={"policy": "fastest"})
    response = api.dave.post("deployments", {"slug": "chat", "spec": spec})
    assert response.status_code == 422
    assert set(fields_of(response)) == {"spec.parallelism.tp", "spec.routing.policy"}


@pytest.mark.parametrize(
    ("groups", "field"),
    [
        # issue 12: a list value smuggled flags past the allowlist onto the engine's argv
        ({"runtime": {"extra_flags": {"--reasoning-parser": ["qwen3", "--trust-remote-code"]}}},
         "spec.runtime.extra_flags.--reasoning-parser"),
        ({"runtime": {"extra_flags": {"--chat-template": "/etc/passwd"}}},
         "spec.runtime.extra_flags.--chat-template"),
        ({"model": {"source": "/etc"}}, "spec.model.source"),
        ({"model": {"source": SPEC["model"]["source"], "served_name": "--trust-remote-code"}},
         "spec.model.served_name"),
        ({"runtime": {"env": {"SGLANG_X": "a\nb"}}}, "spec.runtime.env.SGLANG_X"),
    ],
)  # fmt: skip
def test_argv_injection_through_the_spec_is_a_422_naming_the_field(
    api: Clients, groups: dict, field: str
) -> None:
    response = api.dave.post("deployments", {"slug": "chat", "spec": spec_with(**groups)})
    assert response.status_code == 422, response.content
    assert field in fields_of(response)
    assert not Deployment.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"slug": "chat", "spec": SPEC, "colour": "blue"}, "colour"),
        ({"slug": "chat", "spec": {**SPEC, "gpus": 8}}, "spec.gpus"),
        ({"slug": 7, "spec": SPEC}, "slug"),
        ({"slug": "chat", "spec": SPEC, "replicas": "2"}, "replicas"),
        ({"spec": SPEC}, "slug"),
        ({"slug": "chat"}, "spec"),
        ({"slug": "Chat", "spec": SPEC}, "slug"),
        ({"slug": "c" * 80, "spec": SPEC}, "slug"),
        ({"slug": "chät", "spec": SPEC}, "slug"),
        ({"slug": "chat-", "spec": SPEC}, "slug"),
        ({"slug": "chat", "spec": SPEC, "replicas": 9}, "replicas"),
        ({"slug": "chat", "spec": SPEC, "name": "x" * 101}, "name"),
        ({"slug": "chat", "spec": SPEC, "name": "bad\x07bell"}, "name"),
    ],
)
def test_bad_input_gets_a_422_naming_the_field(api: Clients, body: dict, field: str) -> None:
    response = api.dave.post("deployments", body)
    assert response.status_code == 422, response.content
    assert field in fields_of(response)


def test_a_unicode_display_name_is_kept(api: Clients) -> None:
    response = api.dave.post("deployments", {"slug": "chat", "name": "Llama 🦙 Çhat", "spec": SPEC})
    assert response.status_code == 201
    assert api.dave.get("deployments/chat").json()["name"] == "Llama 🦙 Çhat"


def test_malformed_json_huge_bodies_and_nul_characters_get_4xx(api: Clients) -> None:
    assert error_of(api.dave.post("deployments", b"{not json"))["code"] == "bad_request"
    huge = api.dave.post("deployments", {"slug": "chat", "spec": SPEC, "name": "x" * 2_000_000})
    assert huge.status_code == 413 and error_of(huge)["code"] == "too_large"
    nul = api.dave.post("deployments", {"slug": "chat", "spec": SPEC, "name": "a\x00b"})
    assert nul.status_code == 422
    assert api.dave.get("deployments?search=a%00b").status_code == 422
    assert api.dave.post("deployments", [1, 2]).status_code == 422


def test_a_taken_slug_is_a_conflict(api: Clients) -> None:
    assert create(api.dave).status_code == 201
    response = create(api.bob)  # slugs are unique across the installation
    assert response.status_code == 409
    assert fields_of(response) == ["slug"]


def test_viewers_cannot_create_edit_or_delete(api: Clients, endpoint: Deployment) -> None:
    assert create(api.carol, slug="other").status_code == 403
    patch = {"spec": SPEC, "base_revision": 1}
    assert api.carol.patch("deployments/chat", patch).status_code == 403
    assert api.carol.delete("deployments/chat").status_code == 403
    assert api.carol.post("deployments/chat/scale", {"replicas": 2}).status_code == 403
    assert error_of(api.carol.post("deployments/chat/stop"))["code"] == "forbidden"
    assert api.carol.get("deployments/chat").status_code == 200


def test_other_organizations_endpoints_are_not_found(api: Clients, endpoint: Deployment) -> None:
    for path in (f"deployments/{endpoint.pk}", "deployments/chat"):
        assert api.bob.get(path).status_code == 404
        assert api.bob.patch(path, {"spec": SPEC, "base_revision": 1}).status_code == 404
        assert api.bob.delete(path).status_code == 404
        assert api.bob.post(f"{path}/scale", {"replicas": 2}).status_code == 404
        assert api.bob.post(f"{path}/start").status_code == 404
    assert api.bob.get("deployments").json()["count"] == 0
    endpoint.refresh_from_db()
    assert endpoint.desired_state == "running" and endpoint.generation == 1


def test_get_by_id_or_slug(api: Clients, endpoint: Deployment) -> None:
    by_id = api.carol.get(f"deployments/{endpoint.pk}").json()
    assert by_id == api.carol.get("deployments/chat").json()
    assert error_of(api.carol.get("deployments/nope"))["code"] == "not_found"


def test_editing_settings_creates_a_new_revision(api: Clients, endpoint: Deployment) -> None:
    spec = spec_with(batching={"max_running_requests": 64})
    response = api.dave.patch(
        "deployments/chat", {"spec": spec, "base_revision": 1, "message": "cap batch"}
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["target_revision"] == 2 and body["generation"] == 2
    assert body["spec"]["batching"]["max_running_requests"] == 64
    assert Revision.objects.get(deployment=endpoint, number=2).message == "cap batch"


def test_saving_identical_settings_changes_nothing(api: Clients, endpoint: Deployment) -> None:
    response = api.dave.patch("deployments/chat", {"spec": SPEC, "base_revision": 1})
    assert response.status_code == 200
    assert response.json()["target_revision"] == 1 and response.json()["generation"] == 1


def test_an_edit_based_on_a_stale_revision_is_a_conflict(
    api: Clients, endpoint: Deployment
) -> None:
    first = spec_with(batching={"max_running_requests": 64})
    assert (
        api.dave.patch("deployments/chat", {"spec": first, "base_revision": 1}).status_code == 200
    )
    second = spec_with(batching={"max_running_requests": 32})
    response = api.alice.patch("deployments/chat", {"spec": second, "base_revision": 1})
    assert response.status_code == 409
    error = error_of(response)
    assert error["code"] == "revision_conflict" and fields_of(response) == ["base_revision"]
    body = api.dave.get("deployments/chat").json()
    assert body["target_revision"] == 2
    assert body["spec"]["batching"]["max_running_requests"] == 64


def test_an_invalid_edit_keeps_the_running_revision(api: Clients, endpoint: Deployment) -> None:
    spec = spec_with(parallelism={"tp": 3})
    response = api.dave.patch("deployments/chat", {"spec": spec, "base_revision": 1})
    assert response.status_code == 422 and fields_of(response) == ["spec.parallelism.tp"]
    assert endpoint.revisions.count() == 1


def test_scale_stop_start(api: Clients, endpoint: Deployment) -> None:
    scaled = api.dave.post("deployments/chat/scale", {"replicas": 3})
    assert scaled.status_code == 200 and scaled.json()["desired_replicas"] == 3
    too_many = api.dave.post("deployments/chat/scale", {"replicas": 5})
    assert too_many.status_code == 422 and fields_of(too_many) == ["replicas"]
    negative = api.dave.post("deployments/chat/scale", {"replicas": -1})
    assert negative.status_code == 422 and fields_of(negative) == ["replicas"]
    stopped = api.dave.post("deployments/chat/stop").json()
    assert stopped["desired_state"] == "stopped" and stopped["status"] == "stopped"
    started = api.dave.post("deployments/chat/start").json()
    assert started["desired_state"] == "running" and started["desired_replicas"] == 3
    assert started["generation"] == 4


def test_scaled_to_zero_then_started_comes_back_with_the_minimum(
    api: Clients, endpoint: Deployment
) -> None:
    assert api.dave.post("deployments/chat/scale", {"replicas": 0}).json()["status"] == (
        "scaled_to_zero"
    )
    assert autoscaler.wake(endpoint.pk) is True
    assert autoscaler.wake(endpoint.pk) is False  # idempotent
    endpoint.refresh_from_db()
    assert endpoint.desired_replicas == 1
    assert endpoint.events.filter(reason="ScaleFromZero").count() == 1


def test_delete_marks_deleting_and_finalising_removes_it(
    api: Clients, endpoint: Deployment
) -> None:
    response = api.dave.delete("deployments/chat")
    assert response.status_code == 202 and response.json()["status"] == "deleting"
    assert api.dave.delete("deployments/chat").status_code == 202  # again: no-op
    edit = api.dave.patch("deployments/chat", {"spec": SPEC, "base_revision": 1})
    assert edit.status_code == 409 and error_of(edit)["code"] == "deleting"
    assert reconcile.finalize_deletion(endpoint.pk) is True
    assert api.dave.get("deployments/chat").status_code == 404
    assert not Revision.objects.exists()


def test_finalising_a_live_endpoint_does_nothing(endpoint: Deployment) -> None:
    assert reconcile.finalize_deletion(endpoint.pk) is False
    assert Deployment.objects.filter(pk=endpoint.pk).exists()


def _make(cast: Cast, n: int) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    for i in range(n):
        services.create_deployment(actor, slug=f"ep-{i}", name=f"Endpoint {i}", spec=SPEC)


@pytest.mark.parametrize("rows", [2, 25])
def test_listing_takes_a_bounded_number_of_queries(
    api: Clients, cast: Cast, rows: int, django_assert_max_num_queries
) -> None:
    _make(cast, rows)
    api.dave.get("deployments")  # warm the key's last-used stamp
    with django_assert_max_num_queries(3):
        body = api.dave.get("deployments?limit=200").json()
    assert body["count"] == rows and len(body["items"]) == rows
    with django_assert_max_num_queries(3):  # the status filter runs in SQL: the same queries
        assert api.dave.get("deployments?status=pending").json()["count"] == rows


def test_list_filters_and_pagination(api: Clients, cast: Cast) -> None:
    _make(cast, 5)
    services.stop(cast.actor(cast.dave, cast.acme), "ep-1")
    page = api.carol.get("deployments?limit=2").json()
    assert page["count"] == 5 and len(page["items"]) == 2
    assert [d["slug"] for d in page["items"]] == ["ep-4", "ep-3"]  # newest first
    following = api.carol.get(page["next"]).json()
    assert [d["slug"] for d in following["items"]] == ["ep-2", "ep-1"]
    last = api.carol.get(following["next"]).json()
    assert [d["slug"] for d in last["items"]] == ["ep-0"] and last["next"] is None
    assert [d["slug"] for d in api.carol.get("deployments?status=stopped").json()["items"]] == [
        "ep-1"
    ]
    assert api.carol.get("deployments?search=POINT 3").json()["count"] == 1
    assert api.carol.get("deployments?cluster=local").json()["count"] == 5
    assert api.carol.get("deployments?cluster=elsewhere").json()["count"] == 0
    bad = api.carol.get("deployments?status=happy")
    assert bad.status_code == 422 and fields_of(bad) == ["status"]
    assert fields_of(api.carol.get("deployments?limit=0")) == ["limit"]
    assert fields_of(api.carol.get("deployments?limit=abc")) == ["limit"]


def test_hicache_tiers_are_stored_and_bad_ones_refused_naming_the_field(api: Clients) -> None:
    """Issue 29: `kv_cache.tiers` through the API; a storage tier without a host tier and an
    unknown write policy are 422s naming their fields, nothing saved."""
    bad = spec_with(kv_cache={"tiers": {"storage": {"backend": "file", "node_path": "/mnt/kv"}}})
    response = api.dave.post("deployments", {"slug": "tiers", "spec": bad})
    assert response.status_code == 422
    assert "spec.kv_cache.tiers.storage" in fields_of(response)
    policy = spec_with(kv_cache={"tiers": {"host": {"write_policy": "sometimes"}}})
    response = api.dave.post("deployments", {"slug": "tiers", "spec": policy})
    assert response.status_code == 422
    assert fields_of(response) == ["spec.kv_cache.tiers.host.write_policy"]
    assert not Deployment.objects.exists()
    good = spec_with(kv_cache={"tiers": {"host": {"ratio": 2.5}}})
    created = api.dave.post("deployments", {"slug": "tiers", "spec": good})
    assert created.status_code == 201, created.content
    assert created.json()["spec"]["kv_cache"]["tiers"]["host"]["ratio"] == 2.5


def test_a_warm_pool_is_stored_and_a_bad_one_refused_naming_the_field(api: Clients) -> None:
    """Issue 29: `autoscaling.warm_replicas` through the API; more warm replicas than the
    endpoint may run, or a negative count, is a 422 naming the field, nothing saved."""
    scale = {"min_replicas": 0, "max_replicas": 2, "scale_to_zero": True}
    for warm in (3, -1):
        bad = spec_with(autoscaling={**scale, "warm_replicas": warm})
        response = api.dave.post("deployments", {"slug": "warm", "spec": bad})
        assert response.status_code == 422, response.content
        assert fields_of(response) == ["spec.autoscaling.warm_replicas"]
    assert not Deployment.objects.exists()
    good = spec_with(autoscaling={**scale, "warm_replicas": 1})
    created = api.dave.post("deployments", {"slug": "warm", "spec": good})
    assert created.status_code == 201, created.content
    assert created.json()["spec"]["autoscaling"]["warm_replicas"] == 1
