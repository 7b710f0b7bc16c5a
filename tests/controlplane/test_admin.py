"""The Django admin shows memberships, API keys and the audit trail but cannot change them.

Those rows change only through ``controlplane.services`` (role rules, the audit trail, the
gateway's change notification); an admin form that saved them directly would skip all three.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.db.models import Model
from django.http import HttpRequest
from django.test import Client

from controlplane import services
from controlplane.models import ApiKey, AuditEvent, Membership, Role
from tests.conftest import PASSWORD, Cast


@dataclass(frozen=True)
class Row:
    instance: Model
    url: str  # /admin/<app>/<model>/
    edit: dict[str, str]  # a change the admin must refuse


def _membership(cast: Cast) -> Row:
    carol = Membership.objects.get(user=cast.carol, organization=cast.acme)
    edit = {"organization": str(cast.acme.pk), "user": str(cast.carol.pk), "role": Role.OWNER}
    return Row(carol, "/admin/controlplane/membership/", edit)


def _api_key(cast: Cast) -> Row:
    actor = cast.actor(cast.alice, cast.acme)
    created = services.create_api_key(actor, name="app", kind="inference")
    key = ApiKey.objects.get(pk=created.api_key.pk)
    edit = {"name": "renamed", "kind": "management", "organization": str(cast.globex.pk)}
    return Row(key, "/admin/controlplane/apikey/", edit)


def _audit_event(cast: Cast) -> Row:
    services.create_api_key(cast.actor(cast.alice, cast.acme), name="app", kind="inference")
    event = AuditEvent.objects.filter(organization=cast.acme).latest("created_at")
    return Row(event, "/admin/controlplane/auditevent/", {"action": "nothing.happened"})


ROWS = {"membership": _membership, "api key": _api_key, "audit event": _audit_event}


@pytest.fixture
def operator() -> Client:
    get_user_model().objects.create_superuser("root", password=PASSWORD)
    client = Client()
    # django-axes counts attempts per address, so authentication needs the request.
    assert client.login(request=HttpRequest(), username="root", password=PASSWORD)
    return client


def _fields(instance: Model) -> dict[str, object]:
    instance.refresh_from_db()
    return {field.attname: getattr(instance, field.attname) for field in instance._meta.fields}


@pytest.mark.parametrize("kind", sorted(ROWS))
def test_the_admin_lists_and_shows_but_offers_no_change(
    cast: Cast, operator: Client, kind: str
) -> None:
    row = ROWS[kind](cast)
    listing = operator.get(row.url)
    assert listing.status_code == 200
    assert "delete_selected" not in listing.content.decode()  # no bulk delete action
    assert f'href="{row.url}add/"' not in listing.content.decode()
    page = operator.get(f"{row.url}{row.instance.pk}/change/")
    assert page.status_code == 200
    assert 'name="_save"' not in page.content.decode()


@pytest.mark.parametrize("kind", sorted(ROWS))
def test_the_admin_refuses_to_save_add_or_delete(cast: Cast, operator: Client, kind: str) -> None:
    row = ROWS[kind](cast)
    before = _fields(row.instance)
    change = f"{row.url}{row.instance.pk}/change/"
    assert operator.post(change, {**row.edit, "_save": "Save"}).status_code == 403
    assert operator.get(f"{row.url}add/").status_code == 403
    assert operator.post(f"{row.url}add/", row.edit).status_code == 403
    assert operator.post(f"{row.url}{row.instance.pk}/delete/", {"post": "yes"}).status_code == 403
    bulk = {"action": "delete_selected", "_selected_action": str(row.instance.pk), "post": "yes"}
    operator.post(row.url, bulk)
    assert _fields(row.instance) == before


def test_the_admin_does_not_show_a_keys_hash(cast: Cast, operator: Client) -> None:
    row = _api_key(cast)
    page = operator.get(f"{row.url}{row.instance.pk}/change/").content.decode()
    assert row.instance.key_hash not in page  # type: ignore[attr-defined]
    assert row.instance.prefix in page  # type: ignore[attr-defined]
