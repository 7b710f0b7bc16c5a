"""Who may call /api/v1: management keys, or a console session with CSRF; and the error shape
of requests that never reach a route (401, 404, 405)."""

from __future__ import annotations

import json
import time
from typing import Any

from django.http import HttpRequest
from django.test import Client

from controlplane import services as platform
from tests.api.conftest import SPEC, Api, Clients, error_of
from tests.conftest import PASSWORD, Cast


def test_no_key_a_wrong_key_or_an_inference_key_is_401(api: Clients, cast: Cast) -> None:
    assert error_of(api.anonymous.get("deployments"))["code"] == "unauthenticated"
    assert Api("plm_000000000000_nope").get("deployments").status_code == 401
    inference = platform.create_api_key(
        cast.actor(cast.dave, cast.acme), name="app", kind="inference"
    )
    assert Api(inference.plaintext).get("deployments").status_code == 401
    basic = api.anonymous.get("deployments", Authorization="Basic YWxpY2U6eA==")
    assert basic.status_code == 401


def _session(cast: Cast) -> Client:
    client = Client(enforce_csrf_checks=True)
    # django-axes counts attempts per address, so authentication needs the request.
    assert client.login(request=HttpRequest(), username="dave", password=PASSWORD)
    return client


def test_a_console_session_can_read(cast: Cast) -> None:
    response = _session(cast).get("/api/v1/deployments")
    assert response.status_code == 200 and response.json()["count"] == 0


def test_a_console_session_must_send_the_csrf_token_to_change_anything(cast: Cast) -> None:
    client = _session(cast)
    body = json.dumps({"slug": "chat", "spec": SPEC})
    refused = client.post("/api/v1/deployments", body, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in error_of(refused)["message"]
    client.get("/login/")  # the console page sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    accepted = client.post(
        "/api/v1/deployments", body, content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert accepted.status_code == 201, accepted.content
    assert accepted.json()["cluster"]["name"] == "local"


def test_unknown_routes_and_methods_answer_in_the_error_shape(api: Clients) -> None:
    missing = api.dave.get("no-such-thing")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"
    wrong = api.dave.request("PUT", "deployments", {})
    assert wrong.status_code == 405 and error_of(wrong)["code"] == "method_not_allowed"
    assert "GET" in wrong["Allow"] and "POST" in wrong["Allow"]
    assert error_of(api.dave.get("/api/v1/"))["code"] == "not_found"
    assert error_of(api.dave.post("openapi.json"))["code"] == "method_not_allowed"


def test_the_interactive_docs_are_served_without_a_cdn(api: Clients) -> None:
    page = api.anonymous.get("docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in html and "cdn" not in html.lower()


def test_a_caller_over_its_budget_gets_429_with_retry_after(
    api: Clients, cast: Cast, settings: Any
) -> None:
    settings.PLINTH_API_RATE_LIMIT = 3
    for _attempt in range(2):  # budgets are per minute: redo on a fresh key if one ended meanwhile
        key = platform.create_api_key(
            cast.actor(cast.alice, cast.acme), name="burst", kind="management", role="viewer"
        )
        window = int(time.time() // 60)
        statuses = [Api(key.plaintext).get("gpus").status_code for _ in range(4)]
        limited = Api(key.plaintext).get("gpus")
        if int(time.time() // 60) == window:
            break
    assert statuses == [200, 200, 200, 429]
    assert error_of(limited)["code"] == "rate_limited" and int(limited["Retry-After"]) >= 1
    assert api.dave.get("gpus").status_code == 200  # another key has its own budget
