"""With PostgreSQL down the console and the API answer 503 with Retry-After, not a 500.

The server is uvicorn serving ``controlplane.asgi`` as in production, pointed at a port where
no PostgreSQL listens (the database is down). Three ways a request meets the database: an API
view (the API's handlers), a middleware loading a session (Django's 500 handler), a console
view (the DatabaseUnavailable middleware). None may reveal where the database is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from controlplane.keys import generate_key
from runtime.sim.launcher import free_port
from tests.api.conftest import error_of
from tests.console_server import serve_console
from tests.gateway.conftest import subprocess_env


@pytest.fixture(scope="module")
def console_without_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    tmp = tmp_path_factory.mktemp("db-down")
    db_port = free_port()
    env = subprocess_env(
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{db_port}/plinth",
        PLINTH_DATA_DIR=str(tmp),
        DB_POOL_TIMEOUT_S="1",  # how long a request waits for a pooled connection
    )
    with serve_console(env, tmp / "uvicorn.log") as url:
        yield url, db_port


def assert_unavailable(response: httpx.Response, db_port: int) -> None:
    assert response.status_code == 503, response.text
    assert int(response.headers["retry-after"]) >= 1
    for internal in (str(db_port), "127.0.0.1", "psycopg", "Traceback", "OperationalError"):
        assert internal not in response.text


def test_an_api_call_answers_503_in_the_error_shape(console_without_database) -> None:
    url, db_port = console_without_database
    key = generate_key("management").plaintext  # well formed: it is looked up
    response = httpx.get(
        f"{url}/api/v1/deployments", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert_unavailable(response, db_port)
    assert error_of(response)["code"] == "unavailable"
    assert "retry" in error_of(response)["message"]


def test_a_console_page_with_a_session_answers_a_503_page(console_without_database) -> None:
    url, db_port = console_without_database
    # The session is loaded (from the database) by a middleware, before any view.
    response = httpx.get(f"{url}/deployments/", cookies={"sessionid": "x" * 32}, timeout=30)
    assert_unavailable(response, db_port)
    assert "text/html" in response.headers["content-type"]
    assert "Temporarily unavailable" in response.text


def test_signing_in_answers_a_503_page(console_without_database) -> None:
    url, db_port = console_without_database
    with httpx.Client(base_url=url, timeout=30) as client:
        form = client.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
        assert form.status_code == 200 and token is not None
        # The view itself looks the user up.
        response = client.post(
            "/login/",
            data={"username": "alice", "password": "x", "csrfmiddlewaretoken": token.group(1)},
        )
    assert_unavailable(response, db_port)
    assert "Temporarily unavailable" in response.text
