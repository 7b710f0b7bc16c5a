"""Shared fixtures: a small named cast (alice owns Acme, bob owns Globex, carol views Acme)."""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kubernetes_validate.utils
import pytest
import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import CommandError
from django.test import TransactionTestCase

from controlplane import services
from controlplane.access import Actor
from controlplane.models import Organization, Role

# Fixtures that tests in more than one folder use (one module per kind, each says what it gives).
pytest_plugins = ["tests.fixtures.endpoints", "tests.fixtures.sdk", "tests.fixtures.oidc"]

DEADLOCK_DETECTED = "40P01"  # PostgreSQL's SQLSTATE

# kubernetes-validate reads and parses its schema files on every call (one version's definitions
# alone are 1.2 MB of JSON), and the tests validate thousands of rendered objects against a few
# dozen files: each file is parsed once per test process instead. The same schemas check the
# same objects the same way; only the re-reading is gone.
kubernetes_validate.utils.schema_contents = functools.cache(  # type: ignore[assignment]
    kubernetes_validate.utils.schema_contents
)


def _flush_retrying_deadlocks(flush: Any) -> Any:
    """A transactional test's flush (one TRUNCATE of every table) can deadlock with a pass that a
    live worker process, which outlives the test (a module's console and worker), is still
    committing. PostgreSQL then aborts one of the two; when it picks the flush, the test errors
    and the next test starts on the rows this one left. The aborted TRUNCATE changed nothing, so
    trying it again once the worker's transaction is gone is safe."""

    def teardown(self: TransactionTestCase) -> None:
        for attempt in range(5):
            try:
                return flush(self)
            except CommandError as error:
                cause = getattr(error.__cause__, "__cause__", None)
                if getattr(cause, "sqlstate", None) != DEADLOCK_DETECTED or attempt == 4:
                    raise

    return teardown


TransactionTestCase._fixture_teardown = _flush_retrying_deadlocks(  # type: ignore[method-assign]
    TransactionTestCase._fixture_teardown
)


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
    return make_cast()


def make_cast() -> Cast:
    """The cast's people and organizations (the ``cast`` fixture's, for fixtures of a wider
    scope that build in a transaction of their own)."""
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


def priority_lists(queue: str) -> list[str]:
    """The Redis lists of one queue, in the order a worker takes from them: kombu keeps one per
    priority step (0, the default, under the queue's own name), lowest number first."""
    return [queue, *(f"{queue}\x06\x16{step}" for step in (3, 6, 9))]


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    """The real Celery broker (Redis), its default queue empty before and after the test."""
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(*priority_lists(settings.CELERY_TASK_DEFAULT_QUEUE))
    yield client
    client.delete(*priority_lists(settings.CELERY_TASK_DEFAULT_QUEUE))
    client.close()


def queued(broker: redis.Redis) -> list[tuple[str, list[Any]]]:
    """(task name, args) of every message waiting in the default queue, in the order a worker
    takes them: by priority, then oldest first."""
    out = []
    for name in priority_lists(settings.CELERY_TASK_DEFAULT_QUEUE):
        for raw in reversed(broker.lrange(name, 0, -1)):
            message = json.loads(raw)
            args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
            out.append((message["headers"]["task"], args))
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse ``django_db(serialized_rollback=True)``: it makes a test depend on which tests ran
    before it. It reloads a snapshot of the rows migrations made, content types included, with
    their first ids; after any other ``transaction=True`` test has flushed the database and
    post_migrate has recreated those rows under new ids, the reload collides with them
    (IntegrityError on django_content_type). Rows that migrations seed are recreated on demand
    (``deployments.clusters.services.default_cluster``), so no test needs the snapshot."""
    offenders = [
        item.nodeid
        for item in items
        if any(m.kwargs.get("serialized_rollback") for m in item.iter_markers("django_db"))
    ]
    if offenders:
        raise pytest.UsageError(
            "django_db(serialized_rollback=True) makes tests depend on their order; use "
            "transaction=True and create what the test needs: " + ", ".join(offenders)
        )
