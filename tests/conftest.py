"""Shared fixtures: a small named cast (alice owns Acme, bob owns Globex, carol views Acme)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser

from controlplane import services
from controlplane.access import Actor
from controlplane.models import Organization, Role


@dataclass
class Cast:
    alice: AbstractBaseUser
    bob: AbstractBaseUser
    carol: AbstractBaseUser
    dave: AbstractBaseUser
    acme: Organization
    globex: Organization

    def actor(self, user: AbstractBaseUser, org: Organization) -> Actor:
        return services.actor_for_user(user, org.pk)


PASSWORD = "correct-horse-battery-staple"


@pytest.fixture
def cast(db: None) -> Cast:
    users = get_user_model()
    alice = users.objects.create_user("alice", password=PASSWORD)
    bob = users.objects.create_user("bob", password=PASSWORD)
    carol = users.objects.create_user("carol", password=PASSWORD)
    dave = users.objects.create_user("dave", password=PASSWORD)
    acme = services.create_organization(name="Acme", owner=alice)
    globex = services.create_organization(name="Globex", owner=bob)
    owner = services.actor_for_user(alice, acme.pk)
    services.add_member(owner, username="carol", role=Role.VIEWER)
    services.add_member(owner, username="dave", role=Role.DEVELOPER)
    return Cast(alice=alice, bob=bob, carol=carol, dave=dave, acme=acme, globex=globex)
