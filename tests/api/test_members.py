"""/api/v1/members and invitations: list, invite (the person accepts), change role, remove
(admins; owners make owners); nothing tells whether a username exists outside the org."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from controlplane import services as platform
from controlplane.models import AuditEvent, Invitation, Membership
from tests.api.conftest import Api, Clients, error_of, fields_of
from tests.conftest import Cast


def test_members_are_listed_with_their_roles(api: Clients) -> None:
    members = {m["username"]: m["role"] for m in api.carol.get("members").json()["items"]}
    assert members == {"alice": "owner", "carol": "viewer", "dave": "developer"}
    assert {m["username"] for m in api.bob.get("members").json()["items"]} == {"bob"}


def session(user: Any) -> Api:
    """The person's own console session (CSRF is not enforced by Django's test client)."""
    client = Client()
    client.force_login(user)
    return Api(None, client=client)


def invite(api: Api, username: str, role: str = "viewer") -> Any:
    return api.post("members", {"username": username, "role": role})


def test_an_admin_invites_and_the_person_joins_only_by_accepting(api: Clients, cast: Cast) -> None:
    erin = get_user_model().objects.create_user("erin")
    invited = invite(api.alice, "erin")
    assert invited.status_code == 202
    assert invited.json()["status"] == "pending" and invited.json()["organization"] == "Acme"
    assert not Membership.objects.filter(user=erin).exists()
    assert [i["username"] for i in api.alice.get("invitations").json()["items"]] == ["erin"]
    mine = session(erin).get("me/invitations").json()["items"]
    assert [(i["id"], i["role"]) for i in mine] == [(invited.json()["id"], "viewer")]
    joined = session(erin).post(f"me/invitations/{invited.json()['id']}/accept")
    assert joined.status_code == 200 and joined.json()["role"] == "viewer"
    member_id = joined.json()["id"]
    assert api.alice.get("invitations").json()["items"] == []
    changed = api.alice.patch(f"members/{member_id}", {"role": "developer"})
    assert changed.json()["role"] == "developer"
    assert api.bob.patch(f"members/{member_id}", {"role": "viewer"}).status_code == 404
    assert api.bob.delete(f"members/{member_id}").status_code == 404
    assert api.alice.delete(f"members/{member_id}").status_code == 204
    assert "erin" not in {m["username"] for m in api.alice.get("members").json()["items"]}


def _comparable(response: Any) -> tuple[int, dict[str, Any]]:
    body = response.json()
    return response.status_code, {k: v for k, v in body.items() if k not in ("id", "username")}


def test_inviting_answers_the_same_whether_or_not_the_user_exists(api: Clients, cast: Cast) -> None:
    # bob exists (in Globex); nobody is called "nobody". The answers must not tell them apart.
    existing, missing = invite(api.alice, "bob"), invite(api.alice, "nobody")
    assert _comparable(existing)[0] == 202
    without_times = [
        {k: v for k, v in body.items() if not k.endswith("_at")}
        for _, body in (_comparable(existing), _comparable(missing))
    ]
    assert without_times[0] == without_times[1]
    assert set(existing.headers) == set(missing.headers)
    # bob is not added to Acme by being invited.
    assert not Membership.objects.filter(user=cast.bob, organization=cast.acme).exists()


@hypothesis_settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=st.from_regex(r"[A-Za-z0-9@.+_-]{1,40}", fullmatch=True))
def test_no_username_is_told_apart_by_the_answer(api: Clients, cast: Cast, name: str) -> None:
    if Membership.objects.filter(organization=cast.acme, user__username=name).exists():
        return  # "already a member" is about Acme itself, which the inviter may know
    Invitation.objects.all().delete()
    answer = invite(api.alice, name)
    assert answer.status_code == 202, answer.content
    assert answer.json()["status"] == "pending" and answer.json()["username"] == name


def test_a_key_cannot_accept_for_a_person_and_others_cannot_see_the_invitation(
    api: Clients, cast: Cast
) -> None:
    invitation_id = invite(api.alice, "bob").json()["id"]
    # Globex's admin key acts for Globex, not for bob the person.
    refused = api.bob.post(f"me/invitations/{invitation_id}/accept")
    assert refused.status_code == 403 and "person" in error_of(refused)["message"]
    assert api.bob.get("me/invitations").status_code == 403
    # Someone else's session sees nothing and cannot accept it.
    assert session(cast.dave).get("me/invitations").json()["items"] == []
    assert session(cast.dave).post(f"me/invitations/{invitation_id}/accept").status_code == 404
    assert api.anonymous.get("me/invitations").status_code == 401
    assert not Membership.objects.filter(user=cast.bob, organization=cast.acme).exists()


def test_declined_and_revoked_invitations_cannot_be_accepted(api: Clients, cast: Cast) -> None:
    bob = session(cast.bob)
    first = invite(api.alice, "bob").json()["id"]
    assert bob.post(f"me/invitations/{first}/decline").status_code == 204
    assert bob.post(f"me/invitations/{first}/accept").status_code == 404
    second = invite(api.alice, "bob").json()["id"]
    assert api.bob.delete(f"invitations/{second}").status_code == 404  # Globex's key
    assert api.alice.delete(f"invitations/{second}").status_code == 204
    assert bob.post(f"me/invitations/{second}/accept").status_code == 404
    actions = set(
        AuditEvent.objects.filter(organization=cast.acme).values_list("action", flat=True)
    )
    assert {"invitation.create", "invitation.decline", "invitation.revoke"} <= actions
    assert not Membership.objects.filter(user=cast.bob, organization=cast.acme).exists()


def test_member_refusals(api: Clients, cast: Cast) -> None:
    assert invite(api.dave, "bob").status_code == 403
    assert api.carol.get("invitations").status_code == 403
    assert fields_of(invite(api.alice, "bob", role="king")) == ["role"]
    assert fields_of(invite(api.alice, "no spaces")) == ["username"]
    dupe = invite(api.alice, "carol")
    assert dupe.status_code == 409 and fields_of(dupe) == ["username"]
    assert invite(api.alice, "bob").status_code == 202
    again = invite(api.alice, "bob")
    assert again.status_code == 409 and "pending invitation" in error_of(again)["message"]
    # A management key acts as admin at most, so it cannot make owners.
    owner = invite(api.alice, "erin", role="owner")
    assert owner.status_code == 403 and error_of(owner)["code"] == "forbidden"
    assert fields_of(api.alice.patch("members/0", {"role": "viewer"})) == ["member_id"]
    assert fields_of(api.alice.delete("invitations/not-a-uuid")) == ["invitation_id"]


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
    # A page and the count: the same whatever the number of rows.
    with django_assert_max_num_queries(3):
        assert api.carol.get("members?limit=200").json()["count"] == 3 + extra
    with django_assert_max_num_queries(3):
        assert len(api.carol.get("api-keys?limit=200").json()["items"]) >= extra
