"""DEBUG is off unless PLINTH_DEBUG=1, and every error is Plinth's own answer: a standalone page
in the console, the error shape under /api/; a POST to a path missing its slash keeps its method.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver

from controlplane.error_pages import server_error
from controlplane.models import ApiKey
from tests.conftest import Cast

ROOT = Path(__file__).resolve().parents[2]
DEBUG_PAGE_MARKS = (b"Traceback", b"DEBUG = True", b"URLconf", b"REDIS_URL", b"DATABASES")

_DEVELOPMENT_SERVER = """
import json, django
django.setup()
from django.conf import settings
from django.test import Client
client = Client(raise_request_exception=False)
out = {"debug": settings.DEBUG}
for name, url, host in [
    ("page_404", "/no-such-page/", "localhost"),
    ("api_404", "/api/v1/no-such-route", "127.0.0.1:8000"),
    ("static", "/static/css/plinth.css", "localhost:8000"),
    ("bad_host", "/no-such-page/", "evil.example"),
]:
    response = client.get(url, HTTP_HOST=host)
    body = b"".join(response) if response.streaming else response.content
    out[name] = [response.status_code, body.decode(errors="replace")[:4000]]
print(json.dumps(out))
"""


def development_server(**env: str) -> dict[str, Any]:
    """Requests answered by Plinth configured as `make run` configures it (development)."""
    clean = {k: v for k, v in os.environ.items() if k not in {"PLINTH_DEBUG", "DEBUG"}}
    clean.update(PLINTH_ENV="development", DJANGO_SETTINGS_MODULE="controlplane.settings", **env)
    result = subprocess.run(
        [sys.executable, "-c", _DEVELOPMENT_SERVER],
        env=clean,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_development_runs_without_debug_and_answers_with_plinths_pages() -> None:
    out = development_server()
    assert out["debug"] is False
    status, page = out["page_404"]
    assert status == 404 and "Plinth" in page and "Not found" in page
    status, body = out["api_404"]
    assert status == 404 and json.loads(body)["error"]["code"] == "not_found"
    assert out["bad_host"][0] == 400 and "Plinth" in out["bad_host"][1]
    for name in ("page_404", "api_404", "bad_host"):
        assert not any(mark.decode() in out[name][1] for mark in DEBUG_PAGE_MARKS), name
    # Static files are still served with DEBUG off (whitenoise from the source folders).
    assert out["static"][0] == 200 and ".card" in out["static"][1]


def test_plinth_debug_turns_debug_on() -> None:
    assert development_server(PLINTH_DEBUG="1")["debug"] is True
    assert development_server(DEBUG="true")["debug"] is False  # the old name does nothing


@pytest.mark.urls("tests.controlplane.error_urls")
def test_a_server_error_is_plinths_page_without_internals(db: None) -> None:
    response = Client(raise_request_exception=False).get("/fail/")
    assert response.status_code == 500
    assert b"Something went wrong" in response.content
    assert not any(mark in response.content for mark in DEBUG_PAGE_MARKS)


@pytest.mark.urls("tests.controlplane.error_urls")
def test_a_server_error_under_the_api_is_the_error_shape(db: None) -> None:
    response = Client(raise_request_exception=False).get("/api/fail/")
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal"
    assert b"secret-host" not in response.content


@pytest.mark.urls("tests.controlplane.error_urls")
def test_a_permission_error_is_plinths_403_page(db: None) -> None:
    response = Client().get("/refuse/")
    assert response.status_code == 403 and b"Not allowed" in response.content


def test_the_500_page_needs_no_database(django_assert_num_queries: Any, db: None) -> None:
    request = RequestFactory().get("/endpoints/")
    with django_assert_num_queries(0):
        response = server_error(request)
    assert response.status_code == 500 and b"Plinth" in response.content


# --- a POST to a path missing its trailing slash ------------------------------------------------


def _slashed_routes(
    patterns: list[URLPattern | URLResolver] | None = None, prefix: str = ""
) -> list[str]:
    """Every console route that ends in "/", with sample values for its parameters."""
    samples = {
        "slug": "chat",
        "uuid": "00000000-0000-0000-0000-000000000001",
        "int": "1",
        "str": "x",
    }
    found: list[str] = []
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        route = str(entry.pattern)
        if route.startswith(("api/", "admin/")):  # the API has no slashes to add; the admin's own
            continue  # (its sign-in included) answer by the admin's rules
        if isinstance(entry, URLResolver):
            found += _slashed_routes(entry.url_patterns, prefix + route)
        elif route.endswith("/"):
            for converter, value in samples.items():
                while f"<{converter}:" in route:
                    start = route.index(f"<{converter}:")
                    route = route[:start] + value + route[route.index(">", start) + 1 :]
            found.append("/" + prefix + route)
    return found


def test_the_walk_finds_the_console_posts() -> None:
    routes = _slashed_routes()
    assert {"/keys/", "/secrets/", "/members/", "/endpoints/chat/scale/"} <= set(routes)


@pytest.mark.parametrize("debug", [True, False])
def test_a_post_without_the_trailing_slash_is_redirected_keeping_the_method(
    cast: Cast, settings: Any, debug: bool
) -> None:
    settings.DEBUG = debug  # Django's APPEND_SLASH raised a RuntimeError (500) in DEBUG
    client = Client(raise_request_exception=False)
    client.force_login(cast.alice)
    for route in _slashed_routes():
        response = client.post(route.rstrip("/"), {"name": "x"})
        assert response.status_code == 308, (route, response.status_code)
        assert response["Location"] == route


def test_a_slashless_post_still_does_its_work(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.alice)
    response = client.post("/keys", {"name": "ci", "kind": "inference"}, follow=True)
    assert response.status_code == 200
    assert ApiKey.objects.filter(name="ci").exists()
