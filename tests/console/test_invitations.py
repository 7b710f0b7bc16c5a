"""Joining an organization in the console: an admin invites, the person accepts or declines on
their own invitations page; nothing tells the inviter whether a username exists."""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.test import Client

from controlplane import invitations
from controlplane.models import AuditEvent, Invitation, Membership
from tests.conftest import Cast
from tests.console.conftest import signed_in


def _flash(response: object) -> str:
    html = response.content.decode()  # type: ignore[attr-defined]
    return " ".join(re.findall(r'<p class="flash[^"]*"[^>]*>(.*?)</p>', html))


def _invite(client: Client, username: str, role: str = "viewer") -> str:
    response = client.post("/members/", {"username": username, "role": role}, follow=True)
    assert response.status_code == 200
    return _flash(response)


def test_inviting_adds_nobody_until_they_accept(alice: Client, cast: Cast) -> None:
    erin = get_user_model().objects.create_user("erin", password="x-long-password")
    _invite(alice, "erin", "developer")
    assert not Membership.objects.filter(user=erin).exists()
    assert "erin" in alice.get("/members/").content.decode().split('id="pending-invitations"')[1]
    person = signed_in(erin)
    # With no organization yet, the console points the person at their invitation.
    assert "/invitations/" in person.get("/endpoints/").content.decode()
    page = person.get("/invitations/").content.decode()
    assert "Acme" in page and "Developer" in page
    invitation = Invitation.objects.get(username="erin")
    joined = person.post(f"/invitations/{invitation.pk}/", {"action": "accept"}, follow=True)
    assert "You joined Acme as developer" in _flash(joined)
    member = Membership.objects.get(user=erin, organization=cast.acme)
    assert member.role == "developer"
    alice.post(f"/members/{member.pk}/", {"role": "viewer", "action": "change"})
    member.refresh_from_db()
    assert member.role == "viewer"
    alice.post(f"/members/{member.pk}/", {"action": "remove"})
    assert not Membership.objects.filter(pk=member.pk).exists()
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"invitation.create", "invitation.accept", "member.remove"} <= actions


def test_the_inviter_cannot_tell_who_exists(alice: Client, cast: Cast) -> None:
    # bob exists (he owns Globex); "nobody" does not. The answers differ only by the name.
    existing, missing = _invite(alice, "bob"), _invite(alice, "nobody")
    assert existing.replace("bob", "NAME") == missing.replace("nobody", "NAME")
    assert "Invitation for bob" in existing
    assert not Membership.objects.filter(user=cast.bob, organization=cast.acme).exists()


def test_a_declined_invitation_is_gone_and_joins_nobody(alice: Client, cast: Cast) -> None:
    _invite(alice, "bob")
    bob = signed_in(cast.bob)
    assert "Invitations (1)" in bob.get("/endpoints/").content.decode()
    invitation = Invitation.objects.get(username="bob")
    bob.post(f"/invitations/{invitation.pk}/", {"action": "decline"})
    assert bob.post(f"/invitations/{invitation.pk}/", {"action": "accept"}).status_code == 404
    assert not Membership.objects.filter(user=cast.bob, organization=cast.acme).exists()
    assert "Invitations (" not in bob.get("/endpoints/").content.decode()


def test_an_invitation_is_only_for_the_person_named(alice: Client, cast: Cast) -> None:
    _invite(alice, "bob")
    invitation = Invitation.objects.get(username="bob")
    dave = signed_in(cast.dave)
    assert "Acme" not in dave.get("/invitations/").content.decode().split("<main")[1]
    assert dave.post(f"/invitations/{invitation.pk}/", {"action": "accept"}).status_code == 404
    assert not Membership.objects.filter(user=cast.bob, organization=cast.acme).exists()


def test_an_admin_revokes_an_invitation(alice: Client, carol: Client, cast: Cast) -> None:
    _invite(alice, "bob")
    invitation = Invitation.objects.get(username="bob")
    assert 'id="pending-invitations"' not in carol.get("/members/").content.decode()
    assert carol.post(f"/members/invitations/{invitation.pk}/revoke/").status_code == 403
    alice.post(f"/members/invitations/{invitation.pk}/revoke/")
    invitation.refresh_from_db()
    assert invitation.status == "revoked"
    bob = signed_in(cast.bob)
    assert bob.post(f"/invitations/{invitation.pk}/", {"action": "accept"}).status_code == 404


def test_a_removed_admins_invitation_dies_with_their_access(cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    dave = Membership.objects.get(user=cast.dave, organization=cast.acme)
    from controlplane import services

    services.change_member_role(owner, membership_id=dave.pk, role="admin")
    invitation = invitations.invite(cast.actor(cast.dave, cast.acme), username="bob", role="admin")
    services.remove_member(owner, membership_id=dave.pk)
    bob = signed_in(cast.bob)
    answer = bob.post(f"/invitations/{invitation.pk}/", {"action": "accept"}, follow=True)
    assert "no longer valid" in _flash(answer)
    assert not Membership.objects.filter(user=cast.bob, organization=cast.acme).exists()
    invitation.refresh_from_db()
    assert invitation.status == "revoked"


def test_a_refused_invitation_names_its_field(alice: Client, cast: Cast) -> None:
    response = alice.post("/members/", {"username": "carol", "role": "viewer"})
    assert response.status_code == 422 and b"carol is already a member" in response.content
    response = alice.post("/members/", {"username": "has space", "role": "viewer"})
    assert response.status_code == 422 and b"a username is 1-150" in response.content


def test_signing_in_with_no_organization_lands_on_the_invitations_not_a_refusal(
    alice: Client, cast: Cast
) -> None:
    # The endpoint list can only answer such a person 403 (a browser logs it as an error).
    erin = get_user_model().objects.create_user("erin", password="x-long-password")
    _invite(alice, "erin", "developer")
    landed = signed_in(erin).get("/", follow=True)
    assert landed.status_code == 200
    assert landed.redirect_chain[-1][0] == "/invitations/"
    assert "Acme" in landed.content.decode()
    # A member still lands on the endpoints.
    assert alice.get("/", follow=True).redirect_chain[-1][0] == "/endpoints/"
