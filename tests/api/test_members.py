"""/api/v1/members: list, add, change role, remove (admins; owners make owners)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from controlplane import services as platform
from tests.api.conftest import Clients, error_of, fields_of
from tests.conftest import Cast


def test_members_are_listed_with_their_roles(api: Clients) -> None:
    members = {m["username"]: m["role"] for m in api.carol.get("members").json()}
    assert members == {"alice": "owner", "carol": "viewer", "dave": "developer"}
    assert {m["username"] for m in api.bob.get("members").json()} == {"bob"}


def test_an_admin_adds_changes_and_removes_a_member(api: Clients, cast: Cast) -> None:
    get_user_model().objects.create_user("erin")
    added = api.alice.post("members", {"username": "erin", "role": "viewer"})
    assert added.status_code == 201
    member_id = added.json()["id"]
    changed = api.alice.patch(f"members/{member_id}", {"role": "developer"})
    assert changed.json()["role"] == "developer"
    assert api.bob.patch(f"members/{member_id}", {"role": "viewer"}).status_code == 404
    assert api.bob.delete(f"members/{member_id}").status_code == 404
    assert api.alice.delete(f"members/{member_id}").status_code == 204
    assert "erin" not in {m["username"] for m in api.alice.get("members").json()}


def test_member_refusals(api: Clients, cast: Cast) -> None:
    assert api.dave.post("members", {"username": "bob", "role": "viewer"}).status_code == 403
    assert fields_of(api.alice.post("members", {"username": "nobody", "role": "viewer"})) == [
        "username"
    ]
    assert fields_of(api.alice.post("members", {"username": "bob", "role": "king"})) == ["role"]
    dupe = api.alice.post("members", {"username": "carol", "role": "viewer"})
    assert dupe.status_code == 409
    # A management key acts as admin at most, so it cannot make owners.
    owner = api.alice.post("members", {"username": "bob", "role": "owner"})
    assert owner.status_code == 403 and error_of(owner)["code"] == "forbidden"
    assert fields_of(api.alice.patch("members/0", {"role": "viewer"})) == ["member_id"]


@pytest.mark.parametrize("extra", [0, 15])
def test_member_and_key_lists_take_a_bounded_number_of_queries(
    api: Clients, cast: Cast, extra: int, django_assert_max_num_queries: Any
) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    for i in range(extra):
        get_user_model().objects.create_user(f"user{i}")
        platform.add_member(owner, username=f"user{i}", role="viewer")
        platform.create_api_key(owner, name=f"k{i}", kind="inference")
    api.carol.get("members")  # warm the key's last-used stamp
    with django_assert_max_num_queries(2):
        assert len(api.carol.get("members").json()) == 3 + extra
    with django_assert_max_num_queries(2):
        assert len(api.carol.get("api-keys").json()) >= extra
