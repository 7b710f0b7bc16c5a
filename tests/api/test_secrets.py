"""/api/v1/secrets: write-only values; admins write, developers see names."""

from __future__ import annotations

from controlplane.models import AuditEvent, Secret
from tests.api.conftest import Clients, fields_of

VALUE = "hf_abcdefghijklmnopqrstuvwxyz0123456789"


def test_a_secret_is_written_and_never_read_back(api: Clients) -> None:
    response = api.alice.post("secrets", {"name": "hf-token", "value": VALUE})
    assert response.status_code == 201
    assert VALUE not in response.content.decode()
    listed = api.dave.get("secrets")
    assert [s["name"] for s in listed.json()["items"]] == ["hf-token"]
    assert VALUE not in listed.content.decode()
    assert VALUE not in str(list(AuditEvent.objects.values()))
    again = api.alice.post("secrets", {"name": "hf-token", "value": "hf_new", "description": "v2"})
    assert again.status_code == 201 and Secret.objects.count() == 1


def test_only_admins_write_and_viewers_cannot_list(api: Clients) -> None:
    assert api.dave.post("secrets", {"name": "x", "value": "y"}).status_code == 403
    assert api.carol.get("secrets").status_code == 403
    assert fields_of(api.alice.post("secrets", {"name": "Bad Name", "value": "y"})) == ["name"]
    assert fields_of(api.alice.post("secrets", {"name": "ok", "value": ""})) == ["value"]


def test_delete_is_scoped_to_the_organization(api: Clients) -> None:
    secret_id = api.alice.post("secrets", {"name": "hf-token", "value": VALUE}).json()["id"]
    assert api.bob.delete(f"secrets/{secret_id}").status_code == 404
    assert api.dave.delete(f"secrets/{secret_id}").status_code == 403
    assert api.alice.delete(f"secrets/{secret_id}").status_code == 204
    assert not Secret.objects.exists()
