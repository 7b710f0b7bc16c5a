"""Fixtures of the sweeps: the attacked world (see ``tests.sweep.world``).

The world is built once per test module, inside a transaction of its own that is rolled back
after the module's last test (``built_world``); each test runs in a savepoint of that
transaction (pytest-django's ``db``), so whatever a test changes is gone before the next one,
in any order, as if each had built the world itself. Each test gets its own signed-in clients
(copies of the built ones' cookies), so no test's requests change another's sessions. A module
whose tests must build their own world (one built under captured logs, say) overrides
``world``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.test import Client, override_settings

from tests.conftest import make_cast
from tests.sweep.world import World, build_world


@pytest.fixture
def run_dir(tmp_path: Path, settings: Any) -> Path:
    """The local driver's run directory, where engines' log files live."""
    settings.PLINTH_LOCAL_RUN_DIR = str(tmp_path / "run")
    return tmp_path / "run"


@pytest.fixture(scope="module")
def built_world(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """The module's world, in a transaction rolled back once the module is done: nothing of it
    is ever committed, so no other module meets it (and no on-commit hook of its writers runs,
    as in any test)."""
    run_dir = tmp_path_factory.mktemp("sweep") / "run"
    outer = transaction.atomic()
    with django_db_blocker.unblock(), override_settings(PLINTH_LOCAL_RUN_DIR=str(run_dir)):
        outer.__enter__()
        try:
            world = build_world(make_cast(), run_dir)
        except BaseException:
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)
            raise
    try:
        yield world
    finally:
        with django_db_blocker.unblock():
            transaction.set_rollback(True)
            outer.__exit__(None, None, None)


@pytest.fixture
def world(built_world: World, db: None, settings: Any) -> World:
    """The module's world, for one test (in a savepoint of the module's transaction)."""
    settings.PLINTH_LOCAL_RUN_DIR = str(built_world.run_dir)
    # The module's tests share the world's callers, whose request budgets (counted in Redis,
    # outside any transaction) would add up across them; each test used to have callers of
    # its own. The budget itself is tests/api's to check.
    settings.PLINTH_API_RATE_LIMIT = 1_000_000
    sessions = {caller: _own(client) for caller, client in built_world.sessions.items()}
    return replace(built_world, sessions=sessions)


def _own(client: Client) -> Client:
    """A client of its own, signed in as ``client`` is (the same session cookie)."""
    own = Client(enforce_csrf_checks=client.handler.enforce_csrf_checks)
    own.cookies = copy.deepcopy(client.cookies)
    return own
