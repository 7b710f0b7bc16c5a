"""Fixtures of the REST API tests: management keys for the cast, a client that records which
documented routes the tests exercise, and endpoints made through the services.

tests/api holds the API's own checks, across every noun's routes, and the fixtures they share:
the route-coverage test (test_openapi.py) counts the requests of every API test module, so each
of them lives here; fixtures that other folders use too live in tests/fixtures/.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import resolve

from controlplane import services as platform
from controlplane.models import Organization, Role
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.conftest import Cast

# A small, valid endpoint: Llama 3.1 8B on one H100.
SPEC: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 1, "max_replicas": 4},
}

# (METHOD, "/api/v1/...{param}") of every request the API tests made, for the coverage test.
ROUTES_HIT: set[tuple[str, str]] = set()
_PARAM = re.compile(r"<(?:\w+:)?(\w+)>")


def _record(method: str, path: str) -> None:
    try:
        match = resolve(path.split("?", 1)[0])
    except Exception:  # an unknown path is a test of the 404, not a route
        return
    ROUTES_HIT.add((method.upper(), "/" + _PARAM.sub(r"{\1}", match.route)))


@dataclass
class Api:
    """A test client speaking JSON to /api/v1 with one management key."""

    key: str | None
    client: Client = field(default_factory=Client)

    def request(self, method: str, path: str, body: Any = None, **headers: str) -> Any:
        if path.startswith("http://testserver"):
            path = path.removeprefix("http://testserver")  # a "next" link
        url = path if path.startswith("/") else f"/api/v1/{path}"
        _record(method, url)
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
        if self.key is not None:
            extra.setdefault("HTTP_AUTHORIZATION", f"Bearer {self.key}")
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        kwargs: dict[str, Any] = {"content_type": "application/json"}
        if body is not None:
            kwargs["data"] = data
        return getattr(self.client, method.lower())(url, **kwargs, **extra)

    def get(self, path: str, **headers: str) -> Any:
        return self.request("GET", path, **headers)

    def post(self, path: str, body: Any = None, **headers: str) -> Any:
        return self.request("POST", path, body if body is not None else {}, **headers)

    def patch(self, path: str, body: Any = None, **headers: str) -> Any:
        return self.request("PATCH", path, body, **headers)

    def delete(self, path: str, **headers: str) -> Any:
        return self.request("DELETE", path, **headers)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "openapi_coverage: runs after every other API test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the route-coverage test last, and only when every API test module is collected
    (a partial run, e.g. one module or -k, cannot have requested every route)."""
    coverage = [item for item in items if item.get_closest_marker("openapi_coverage")]
    if not coverage:
        return
    here = Path(__file__).parent
    modules = {p.name for p in here.glob("test_*.py")}
    collected = {item.path.name for item in items if item.path.parent == here}
    others = [item for item in items if item not in coverage]
    if collected >= modules:
        items[:] = others + coverage
    else:
        config.hook.pytest_deselected(items=coverage)
        items[:] = others


def _key(cast: Cast, org: Organization, role: str) -> str:
    owner = cast.alice if org == cast.acme else cast.bob
    created = platform.create_api_key(
        cast.actor(owner, org), name=f"{role} key", kind="management", role=role
    )
    return created.plaintext


@dataclass
class Clients:
    # Management keys of Acme minted by its owner alice, named after who would hold them.
    alice: Api  # admin (a key's role is admin at most)
    dave: Api  # developer
    carol: Api  # viewer
    bob: Api  # admin of Globex: must never see Acme's objects
    anonymous: Api


@pytest.fixture
def api(cast: Cast) -> Clients:
    return Clients(
        alice=Api(_key(cast, cast.acme, Role.ADMIN)),
        dave=Api(_key(cast, cast.acme, Role.DEVELOPER)),
        carol=Api(_key(cast, cast.acme, Role.VIEWER)),
        bob=Api(_key(cast, cast.globex, Role.ADMIN)),
        anonymous=Api(None),
    )


def spec_with(**groups: dict[str, Any]) -> dict[str, Any]:
    """SPEC with some groups replaced, e.g. spec_with(parallelism={"tp": 3})."""
    return {**SPEC, **groups}


@pytest.fixture
def endpoint(cast: Cast) -> Deployment:
    """Acme's endpoint ``chat`` at revision 1, made by dave through the services."""
    return services.create_deployment(
        cast.actor(cast.dave, cast.acme), slug="chat", name="Chat", spec=SPEC
    )


def error_of(response: Any) -> dict[str, Any]:
    """The error object of a response, checking it has the one shape every error has."""
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "fields"}, error
    assert isinstance(error["message"], str) and error["message"]
    for item in error["fields"]:
        assert set(item) == {"field", "code", "message", "fix"}, item
    return error


def fields_of(response: Any) -> list[str]:
    return [item["field"] for item in error_of(response)["fields"]]
