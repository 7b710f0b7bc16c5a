"""The console/API process under uvicorn keeps its PostgreSQL connections bounded.

Under ASGI each request runs in a thread of its own; a connection kept for reuse after the
request (``CONN_MAX_AGE``) stayed with its finished thread, and bursts of requests piled them
up until PostgreSQL refused clients. The process is started as in production (uvicorn serving
``controlplane.asgi``) against the test database, and its connections are told apart from
everyone else's by their application name.
"""

from __future__ import annotations

import concurrent.futures
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.db import connection

from controlplane import services as platform
from controlplane.models import Role
from tests.conftest import Cast
from tests.console_server import serve_console
from tests.gateway.conftest import subprocess_env

# Unique: other test runs may be bursting at their own server on the same PostgreSQL.
APPLICATION_NAME = f"plinth-burst-{uuid.uuid4().hex[:12]}"
BURSTS, PARALLEL = 4, 60

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process


@pytest.fixture
def console(tmp_path: Path) -> Iterator[str]:
    log = tmp_path / "uvicorn.log"
    # PGAPPNAME is libpq's: every connection the server opens carries this name.
    env = subprocess_env(PGAPPNAME=APPLICATION_NAME, PLINTH_DATA_DIR=str(tmp_path))
    env.pop("DB_POOL_MAX_SIZE", None)  # the default bound is what is tested
    # Waiting for a pooled connection is the point; on a busy test machine 60 queued requests
    # may wait longer than the default 10 s, which would answer 503 (a correct answer, but not
    # what this test is about).
    env["DB_POOL_TIMEOUT_S"] = "120"
    with serve_console(env, log) as url:
        yield url


def server_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            [APPLICATION_NAME],
        )
        return int(cursor.fetchone()[0])


class Sampler:
    """The most connections the server held at any moment it was looked at during a burst."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.peak = max(self.peak, server_connections())
        finally:
            connection.close()  # this thread's own connection

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def burst(url: str, key: str) -> list[int]:
    def one(_: int) -> int:
        response = httpx.get(
            f"{url}/api/v1/deployments", headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        return response.status_code

    with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
        return list(pool.map(one, range(PARALLEL)))


def test_bursts_of_parallel_requests_keep_connections_bounded_and_all_succeed(
    cast: Cast, console: str
) -> None:
    key = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="burst", kind="management", role=Role.VIEWER
    ).plaintext
    bound = settings.DB_POOL_MAX_SIZE
    after_each = []
    for _ in range(BURSTS):
        with Sampler() as sampler:
            statuses = burst(console, key)
        assert statuses == [200] * PARALLEL
        assert sampler.peak <= bound
        after_each.append(server_connections())
    # Nothing piles up from one burst to the next.
    assert max(after_each) <= bound
