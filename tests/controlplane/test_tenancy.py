"""Organizations and roles: isolation between orgs, viewers read only, audit on every change."""

from __future__ import annotations

import pytest

from controlplane import services
from controlplane.access import AccessDenied, NotFound
from controlplane.models import AuditEvent, Membership, Role
from tests.conftest import Cast


def test_a_user_cannot_act_in_an_organization_they_do_not_belong_to(cast: Cast) -> None:
    with pytest.raises(NotFound):
        services.actor_for_user(cast.alice, cast.globex.pk)


def test_members_of_another_org_look_missing(cast: Cast) -> None:
    carol = Membership.objects.get(user=cast.carol, organization=cast.acme)
    with pytest.raises(NotFound):
        services.change_member_role(
            cast.actor(cast.bob, cast.globex), membership_id=carol.pk, role=Role.ADMIN
        )
    with pytest.raises(NotFound):
        services.remove_member(cast.actor(cast.bob, cast.globex), membership_id=carol.pk)
    carol.refresh_from_db()
    assert carol.role == Role.VIEWER


def test_a_viewer_cannot_manage_members(cast: Cast) -> None:
    viewer = cast.actor(cast.carol, cast.acme)
    with pytest.raises(AccessDenied):
        services.add_member(viewer, username="bob", role=Role.VIEWER)


def test_an_admin_cannot_make_owners(cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    services.change_member_role(
        owner,
        membership_id=Membership.objects.get(user=cast.dave, organization=cast.acme).pk,
        role=Role.ADMIN,
    )
    admin = cast.actor(cast.dave, cast.acme)
    carol = Membership.objects.get(user=cast.carol, organization=cast.acme)
    with pytest.raises(AccessDenied):
        services.change_member_role(admin, membership_id=carol.pk, role=Role.OWNER)


def test_the_last_owner_cannot_leave(cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    alice = Membership.objects.get(user=cast.alice, organization=cast.acme)
    with pytest.raises(services.Conflict):
        services.remove_member(owner, membership_id=alice.pk)


def test_unknown_roles_are_refused_by_field(cast: Cast) -> None:
    with pytest.raises(services.ServiceError) as err:
        services.add_member(cast.actor(cast.alice, cast.acme), username="bob", role="superuser")
    assert err.value.field == "role"


def test_every_member_mutation_writes_one_audit_event(cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    count = AuditEvent.objects.count()
    membership = services.add_member(owner, username="bob", role=Role.VIEWER)
    services.change_member_role(owner, membership_id=membership.pk, role=Role.DEVELOPER)
    services.remove_member(owner, membership_id=membership.pk)
    actions = list(AuditEvent.objects.values_list("action", flat=True)[:3])
    assert AuditEvent.objects.count() == count + 3
    assert actions == ["member.remove", "member.change_role", "member.add"]
    assert all(e.organization_id == cast.acme.pk for e in AuditEvent.objects.all()[:3])


@pytest.mark.django_db
def test_bootstrap_creates_the_admin_once() -> None:
    first = services.bootstrap_installation(
        username="admin", org_name="Default", password="pw-1-long-enough"
    )
    second = services.bootstrap_installation(
        username="admin", org_name="Default", password="pw-2-long-enough"
    )
    assert first.password == "pw-1-long-enough"
    assert second.password is None
    assert second.organization.pk == first.organization.pk
    assert Membership.objects.get(organization=first.organization).role == Role.OWNER
