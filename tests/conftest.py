"""Shared fixtures: a small named cast (alice owns Acme, bob owns Globex, carol views Acme)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from django.conf import settings
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


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    """The real Celery broker (Redis), its default queue empty before and after the test."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(settings.CELERY_TASK_DEFAULT_QUEUE)
    yield client
    client.delete(settings.CELERY_TASK_DEFAULT_QUEUE)
    client.close()


def queued(broker: redis.Redis) -> list[tuple[str, list[Any]]]:
    """(task name, args) of every message waiting in the default queue, oldest first."""
    out = []
    for raw in reversed(broker.lrange(settings.CELERY_TASK_DEFAULT_QUEUE, 0, -1)):
        message = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        out.append((message["headers"]["task"], args))
    return out
