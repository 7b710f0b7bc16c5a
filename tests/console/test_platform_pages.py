"""Platform pages: API keys (shown once, scoped, revoked), members and roles, write-only
secrets, the audit log with filters, usage and clusters."""

from __future__ import annotations

import html
import json
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.sessions.models import Session
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane import audit
from controlplane import services as platform
from controlplane.models import ApiKey, AuditEvent, Membership, Secret
from deployments.clusters import services
from deployments.clusters.models import Cluster
from deployments.endpoints.models import Deployment
from deployments.traffic.models import UsageRecord
from tests.conftest import Cast


def _shown_key(response: Any) -> str:
    shown = response.content.decode().split('id="created-key"')[1].split(">")[0]
    return shown.split('value="')[1].split('"')[0]


def test_a_new_key_is_shown_once(alice: Client, endpoint: Deployment) -> None:
    form = {"name": "backend", "kind": "inference", "endpoints": [str(endpoint.pk)]}
    response = alice.post("/keys/", form)
    # Post/redirect/get: the POST's answer carries no key, so nothing resends it.
    assert response.status_code == 303 and response["Location"] == "/keys/"
    assert b"created-key" not in response.content
    key = ApiKey.objects.get(name="backend")
    assert key.allowed_deployment_ids == [endpoint.pk]
    reveal = alice.get("/keys/")
    plaintext = _shown_key(reveal)
    assert plaintext.startswith(key.prefix)
    assert "no-store" in reveal["Cache-Control"]
    assert platform.authenticate_key(plaintext, kind="inference") == key
    reload = alice.get("/keys/").content.decode()
    assert plaintext not in reload and 'id="created-key"' not in reload
    assert ApiKey.objects.count() == 1


def test_a_held_key_is_sealed_in_the_session(alice: Client, cast: Cast) -> None:
    alice.post("/keys/", {"name": "backend", "kind": "inference"})
    key = ApiKey.objects.get(name="backend")
    stored = " ".join(Session.objects.values_list("session_data", flat=True))
    decoded = " ".join(str(s.get_decoded()) for s in Session.objects.all())
    plaintext = _shown_key(alice.get("/keys/"))
    assert str(key.pk) in decoded  # the key's id and sealed value are there ...
    assert plaintext not in stored and plaintext not in decoded  # ... its plaintext is not


def test_a_held_key_shows_only_in_its_organization(alice: Client, cast: Cast) -> None:
    globex = platform.add_member(
        cast.actor(cast.bob, cast.globex), username="alice", role="developer"
    )
    alice.post("/keys/", {"name": "backend", "kind": "inference"})
    alice.post("/org/switch/", {"organization": str(globex.organization_id)})
    assert b'id="created-key"' not in alice.get("/keys/").content


def test_a_key_cannot_be_scoped_to_another_orgs_endpoint(bob: Client, endpoint: Deployment) -> None:
    response = bob.post("/keys/", {"name": "x", "kind": "inference", "endpoints": [endpoint.pk]})
    assert response.status_code == 422
    assert b"names endpoints that do not exist in this organization" in response.content
    assert not ApiKey.objects.exists()


def test_a_refused_key_names_its_field(alice: Client, cast: Cast) -> None:
    response = alice.post("/keys/", {"name": "", "kind": "inference"})
    assert response.status_code == 422
    assert b"key name must not be empty" in response.content
    bad_date = alice.post("/keys/", {"name": "x", "kind": "inference", "expires": "soon"})
    assert bad_date.status_code == 422 and b"expiry: use a date" in bad_date.content


def test_revoking_a_key(alice: Client, cast: Cast) -> None:
    created = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    response = alice.post(f"/keys/{created.api_key.pk}/revoke/", follow=True)
    assert b"revoked" in response.content
    assert platform.authenticate_key(created.plaintext, kind="inference") is None


def test_another_orgs_key_cannot_be_revoked(bob: Client, cast: Cast) -> None:
    created = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    assert bob.post(f"/keys/{created.api_key.pk}/revoke/").status_code == 404
    created.api_key.refresh_from_db()
    assert created.api_key.revoked_at is None


def test_viewers_cannot_create_keys(carol: Client, cast: Cast) -> None:
    assert carol.post("/keys/", {"name": "x", "kind": "inference"}).status_code == 403
    assert not ApiKey.objects.exists()


def test_the_last_owner_cannot_be_demoted(alice: Client, cast: Cast) -> None:
    own = Membership.objects.get(user=cast.alice, organization=cast.acme)
    response = alice.post(f"/members/{own.pk}/", {"role": "viewer"}, follow=True)
    assert b"at least one owner" in response.content


def test_viewers_do_not_see_secret_names(alice: Client, carol: Client, cast: Cast) -> None:
    platform.set_secret(cast.actor(cast.alice, cast.acme), name="hf-token", value="hf_x")
    page = carol.get("/secrets/")
    assert page.status_code == 403
    assert "hf-token" not in page.content.decode()
    assert "hf-token" not in carol.get("/clusters/").content.decode()
    assert "hf-token" in alice.get("/clusters/").content.decode()


def test_secrets_are_write_only(alice: Client, cast: Cast) -> None:
    form = {"name": "hf-token", "value": "hf_supersecretvalue", "description": "HF"}
    assert alice.post("/secrets/", form).status_code == 302
    page = alice.get("/secrets/").content.decode()
    assert "hf-token" in page and "hf_supersecretvalue" not in page
    audit = alice.get("/audit/").content.decode()
    assert "secret.create" in audit and "hf_supersecretvalue" not in audit
    secret = Secret.objects.get(name="hf-token")
    alice.post(f"/secrets/{secret.pk}/delete/")
    assert not Secret.objects.exists()


def test_a_bad_secret_name_is_named(alice: Client, cast: Cast) -> None:
    response = alice.post("/secrets/", {"name": "Bad Name", "value": "v"})
    assert response.status_code == 422 and b"secret name must be" in response.content


def test_the_audit_log_filters_and_stays_in_its_org(alice: Client, bob: Client, cast: Cast) -> None:
    platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")

    def rows(client: Client, query: str) -> str:
        return client.get(f"/audit/{query}").content.decode().split("<tbody>")[1]

    filtered = rows(alice, "?action=api_key")
    assert "api_key.create" in filtered and "member.add" not in filtered
    assert "member.add" in rows(alice, "?actor=alice")
    assert "api_key.create" not in rows(bob, "")


def test_the_audit_log_takes_a_fixed_number_of_queries(alice: Client, cast: Cast) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            alice.get("/audit/")
        return len(ctx.captured_queries)

    few = count()
    actor = cast.actor(cast.alice, cast.acme)
    for n in range(5):
        platform.create_api_key(actor, name=f"k{n}", kind="inference")
    assert count() == few


def test_usage_sums_per_key_and_endpoint(alice: Client, bob: Client, cast: Cast) -> None:
    key = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    minute = timezone.now().replace(second=0, microsecond=0)
    # An hour apart, so the hourly chart has several points whatever the time of day.
    for i in range(3):
        UsageRecord.objects.create(
            organization=cast.acme, api_key=key.api_key, deployment_id=key.api_key.pk,
            deployment_slug="chat", minute=minute - timedelta(minutes=61 * i), requests=2,
            prompt_tokens=100, cached_tokens=40, completion_tokens=1000,
        )  # fmt: skip
    page = alice.get("/usage/").content.decode()
    assert ">6<" in page and ">3000<" in page and "<polyline" in page
    # The chart's data for the browser: an hourly time axis over the whole day, tokens as units.
    data = json.loads(
        html.unescape(
            page.split('data-chart-id="chart-tokens-per-hour" data-chart="')[1].split('"')[0]
        )
    )
    assert data["unit"] == "tokens" and len(data["times"]) in (24, 25)
    assert [s["label"] for s in data["series"]] == ["prompt", "completion"]
    assert sum(data["series"][1]["values"]) == 3000
    assert "up to about 80 seconds after a call" in page  # when to expect a call's usage
    assert "chat" not in bob.get("/usage/").content.decode().split("<main")[1]


def test_clusters_list_the_shared_local_cluster(alice: Client, cast: Cast) -> None:
    page = alice.get("/clusters/").content.decode()
    assert "local" in page and "(shared)" in page


def test_adding_a_cluster_needs_a_kubeconfig(alice: Client, cast: Cast) -> None:
    response = alice.post("/clusters/", {"name": "gpu-east", "namespace": "plinth"})
    assert response.status_code == 422
    assert b"kubeconfig" in response.content
    platform.set_secret(cast.actor(cast.alice, cast.acme), name="kc", value="apiVersion: v1")
    secret = Secret.objects.get(name="kc")
    form = {"name": "gpu-east", "namespace": "plinth", "kubeconfig": str(secret.pk)}
    assert alice.post("/clusters/", form).status_code == 302
    assert b"gpu-east" in alice.get("/clusters/").content


def test_audit_events_are_recorded_for_console_actions(alice: Client, endpoint: Deployment) -> None:
    alice.post("/endpoints/chat/stop/")
    event = AuditEvent.objects.get(action="deployment.stopped")
    assert event.actor_label == "user:alice"


@pytest.mark.parametrize("url", ["/keys/", "/members/", "/secrets/", "/clusters/", "/usage/"])
def test_list_pages_take_a_bounded_number_of_queries(
    alice: Client, cast: Cast, url: str, django_assert_max_num_queries: Any
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    for n in range(10):
        key = platform.create_api_key(actor, name=f"k{n}", kind="inference")
        platform.set_secret(actor, name=f"s{n}", value="v")
        UsageRecord.objects.create(
            organization=cast.acme, api_key=key.api_key, deployment_id=key.api_key.pk,
            deployment_slug=f"e{n}", minute=timezone.now(), requests=1,
        )  # fmt: skip
    # A constant number whatever the rows (no query per row); /usage/'s quota lines read the
    # quantization runs too (the GPUs they hold, the month's GPU-hours).
    with django_assert_max_num_queries(13):
        assert alice.get(url).status_code == 200


def test_the_favicon_is_served_where_browsers_ask(db: None) -> None:
    response = Client().get("/favicon.ico")
    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert response.content[:4] == b"\x00\x00\x01\x00"  # an ICO file's magic
    assert "max-age" in response["Cache-Control"]


def test_every_page_links_its_icon(alice: Client, cast: Cast) -> None:
    for page in (alice.get("/keys/"), Client().get("/login/")):
        head = page.content.decode().split("</head>")[0]
        assert 'rel="icon" href="/static/favicon.svg"' in head
        assert 'rel="icon" href="/favicon.ico"' in head


def _kube_cluster(cast: Cast) -> Cluster:
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name="kc", value="apiVersion: v1\nkind: Config\n")
    return services.create_cluster(actor, name="gpu-east", kubeconfig_secret_id=secret.pk)


def test_the_clusters_page_shows_observed_gpus(alice: Client, carol: Client, cast: Cast) -> None:
    cluster = _kube_cluster(cast)
    assert "not observed yet" in carol.get("/clusters/").content.decode()
    Cluster.objects.filter(pk=cluster.pk).update(
        gpu_inventory={"nodes": [], "gpus": {"H100-SXM": {"nodes": 2, "gpus": 16, "free": 5}},
                       "error": ""},
        inventory_observed_at=timezone.now(),
    )  # fmt: skip
    page = carol.get("/clusters/").content.decode()
    assert "H100-SXM: 5 / 16 on 2 nodes" in page
    assert f"/clusters/{cluster.pk}/settings/" not in page  # settings are for admins
    assert f"/clusters/{cluster.pk}/settings/" in alice.get("/clusters/").content.decode()


def test_an_admin_edits_a_clusters_settings_as_yaml(
    alice: Client, carol: Client, cast: Cast
) -> None:
    cluster = _kube_cluster(cast)
    url = f"/clusters/{cluster.pk}/settings/"
    assert carol.get(url).status_code == 403
    page = alice.get(url).content.decode()
    assert "nvidia.com/gpu.product" in page and "NVIDIA-H100-80GB-HBM3" in page
    form = {"namespace": "inference", "settings": "node_selector:\n  pool: llm\n"}
    assert alice.post(url, form).status_code == 302
    cluster.refresh_from_db()
    assert cluster.namespace == "inference"
    assert cluster.operator_settings["node_selector"] == {"pool": "llm"}
    assert cluster.operator_settings["gpu_map"]["H200"]["values"] == ["NVIDIA-H200"]
    bad = alice.post(url, {"namespace": "inference", "settings": "labels: {plinth.dev/x: y}"})
    assert bad.status_code == 422 and "Plinth sets the keys" in bad.content.decode()
    broken = alice.post(url, {"namespace": "inference", "settings": "labels: [unclosed"})
    assert broken.status_code == 422 and "not valid YAML" in broken.content.decode()
    cluster.refresh_from_db()
    assert cluster.operator_settings["labels"] == {}
    # Where benchmark Jobs get AIPerf: shown (an image by default) and set like the rest.
    assert "benchmark_aiperf:\n  type: image\n  image: null" in alice.get(url).content.decode()
    mirror = "benchmark_aiperf: {type: image, image: 'registry.internal/aiperf:0.13.0 x'}"
    refused = alice.post(url, {"namespace": "inference", "settings": mirror})
    assert refused.status_code == 422
    assert "settings.benchmark_aiperf.image.image" in refused.content.decode()
    mirror = mirror.replace(" x'", "'")
    assert alice.post(url, {"namespace": "inference", "settings": mirror}).status_code == 302
    cluster.refresh_from_db()
    assert (
        cluster.operator_settings["benchmark_aiperf"]["image"] == "registry.internal/aiperf:0.13.0"
    )


def test_the_audit_log_is_for_admins_and_masks_secret_fields(
    alice: Client, carol: Client, cast: Cast
) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    audit.record(owner, "test.slip", cast.acme, after={"token": "hf_slipped_value", "n": 1})
    page = alice.get("/audit/").content.decode()
    assert "test.slip" in page and "hf_slipped_value" not in page and "(write-only)" in page
    assert carol.get("/audit/").status_code == 403
    assert 'href="/audit/"' not in carol.get("/endpoints/").content.decode()
