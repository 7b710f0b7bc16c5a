"""The playground's server side: a temporary key limited to the endpoint, and refusals that
name the field. (Streaming a reply is exercised in the browser test against a live engine.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from django.test import Client

from controlplane.models import ApiKey
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.endpoints.views.playground import LIMITS
from tests.conftest import Cast
from tests.console.conftest import SPEC

HTMX = {"HTTP_HX_REQUEST": "true"}


def test_a_temporary_key_is_limited_to_the_endpoint(alice: Client, endpoint: Deployment) -> None:
    response = alice.post("/endpoints/chat/playground/key/", **HTMX)
    assert response.status_code == 200
    key = ApiKey.objects.get()
    assert key.is_temporary and key.allowed_deployment_ids == [endpoint.pk]
    assert key.expires_at is not None
    assert b'id="playground-key" value="' + key.prefix.encode() in response.content


def test_viewers_get_no_playground_key(carol: Client, endpoint: Deployment) -> None:
    assert carol.post("/endpoints/chat/playground/key/", **HTMX).status_code == 403
    assert not ApiKey.objects.exists()


def _refused(client: Client, form: dict[str, str]) -> list[str]:
    """POST the playground form; the fields it names, after checking the error shape."""
    response = client.post("/endpoints/chat/playground/chat/", form)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] and error["message"] == error["fields"][0]["message"]
    assert all(set(f) == {"field", "code", "message", "fix"} for f in error["fields"])
    return [f["field"] for f in error["fields"]]


def test_a_chat_without_a_key_or_prompt_names_the_field(
    alice: Client, endpoint: Deployment
) -> None:
    assert _refused(alice, {"prompt": "hi"}) == ["key"]
    assert _refused(alice, {"key": "pk_x", "prompt": " "}) == ["prompt"]
    assert _refused(alice, {"key": "pk_x", "prompt": "hi", "max_tokens": "lots"}) == ["max_tokens"]
    assert _refused(alice, {}) == ["key", "prompt"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_tokens", "100000"),  # the form's own limit is 4096: the server holds to it
        ("max_tokens", "4097"),
        ("max_tokens", "0"),
        ("max_tokens", "-5"),
        ("max_tokens", "1e3"),
        ("max_tokens", "64.5"),
        ("max_tokens", "1_000"),
        ("max_tokens", "\uff16\uff14"),  # fullwidth digits, which int() would take
        ("max_tokens", "9" * 40),
        ("prompt", "x" * 20_001),
        ("key", "pli_" + "a" * 300),
        ("key", "pli_k\r\nX-Injected: 1"),
    ],
)
def test_every_playground_input_is_held_to_its_limit(
    alice: Client, endpoint: Deployment, field: str, value: str
) -> None:
    form = {"key": "pli_k", "prompt": "hi", "max_tokens": "8", field: value}
    assert _refused(alice, form) == [field]


def test_the_form_promises_the_limits_the_server_enforces(
    alice: Client, endpoint: Deployment
) -> None:
    page = alice.get("/endpoints/chat/").content.decode()
    limit = LIMITS["max_tokens"]
    assert f'max="{limit}"' in page.split('id="playground-max"')[1].split(">")[0]
    assert f'maxlength="{LIMITS["prompt"]}"' in page.split('id="playground-prompt"')[1]
    form = {"key": "pli_k", "prompt": "hi", "max_tokens": str(limit + 1)}
    assert _refused(alice, form) == ["max_tokens"]


def test_the_playground_of_another_org_is_missing(bob: Client, endpoint: Deployment) -> None:
    assert bob.post("/endpoints/chat/playground/key/").status_code == 404
    assert bob.post("/endpoints/chat/playground/chat/", {"prompt": "x"}).status_code == 404


def test_router_mode_checks_the_key_itself(
    alice: Client, endpoint: Deployment, settings: object
) -> None:
    settings.PLINTH_PLAYGROUND_UPSTREAM = "router"  # type: ignore[attr-defined]
    response = alice.post("/endpoints/chat/playground/chat/", {"key": "pk_bogus", "prompt": "hi"})
    assert response.status_code == 422
    assert response.json()["error"]["fields"] == [
        {"field": "key", "code": "invalid", "message": "this key cannot call this endpoint",
         "fix": None},
    ]  # fmt: skip


class _FakeGateway(BaseHTTPRequestHandler):
    """A stand-in for the gateway process (a seam: the gateway has its own tests). It records
    what the console forwarded and answers a two-chunk SSE stream with usage."""

    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(
            {
                "path": self.path,
                "auth": self.headers["Authorization"],
                "revision": self.headers.get("X-Plinth-Revision"),
                "body": body,
            }
        )
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in (
            {"choices": [{"delta": {"content": "Hel"}}]},
            {"choices": [{"delta": {"content": "lo"}}]},
            {"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens": 5}},
        ):
            self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_gateway(settings: Any) -> Iterator[list[dict[str, Any]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeGateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.GATEWAY_PUBLIC_URL = f"http://127.0.0.1:{server.server_address[1]}"
    settings.PLINTH_PLAYGROUND_UPSTREAM = "gateway"
    _FakeGateway.seen = []
    yield _FakeGateway.seen
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")
def test_the_chat_goes_through_the_gateway_and_streams_back(
    alice: Client, endpoint: Deployment, fake_gateway: list[dict[str, Any]]
) -> None:
    response = alice.post(
        "/endpoints/chat/playground/chat/", {"key": "pli_k", "prompt": "hi", "max_tokens": "8"}
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"
    stream = b"".join(response).decode()  # the test client is sync: Django collects it
    assert '"content": "Hel"' in stream and stream.endswith("data: [DONE]\n\n")
    [call] = fake_gateway
    assert call["path"] == "/endpoints/chat/v1/chat/completions"
    assert call["auth"] == "Bearer pli_k"
    assert call["body"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert call["body"]["stream"] is True and call["body"]["max_tokens"] == 8
    assert call["body"]["stream_options"] == {"include_usage": True}


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")
def test_an_unreachable_upstream_is_an_error_event(
    alice: Client, endpoint: Deployment, settings: Any
) -> None:
    settings.GATEWAY_PUBLIC_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    settings.PLINTH_PLAYGROUND_UPSTREAM = "gateway"
    response = alice.post("/endpoints/chat/playground/chat/", {"key": "pli_k", "prompt": "hi"})
    stream = b"".join(response).decode()  # the test client is sync: Django collects it
    assert "could not reach the endpoint" in stream and "[DONE]" in stream


class _FailingUpstream(BaseHTTPRequestHandler):
    """A stand-in gateway that refuses: a 5xx carrying a router's internals, or a 4xx in the
    error shape (a seam, as _FakeGateway)."""

    status: ClassVar[int] = 500
    body: ClassVar[bytes] = b""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")
@pytest.mark.parametrize(
    ("status", "body", "shown", "hidden"),
    [
        (500, b"error sending request for url (http://10.1.2.3:30000/v1)", "unavailable", "10.1.2"),
        (502, b'{"error": {"message": "dial tcp 10.9.9.9:80"}}', "unavailable", "10.9.9"),
        (401, b'{"error": {"message": "invalid API key"}}', "invalid API key", "@@"),
        (400, b"<html>traceback at /srv/app.py</html>", "refused the request", "/srv/app.py"),
    ],
)
def test_upstream_refusals_show_a_fixed_summary_for_5xx_and_the_message_for_4xx(
    alice: Client,
    endpoint: Deployment,
    settings: Any,
    status: int,
    body: bytes,
    shown: str,
    hidden: str,
) -> None:
    handler = type("Handler", (_FailingUpstream,), {"status": status, "body": body})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        settings.GATEWAY_PUBLIC_URL = f"http://127.0.0.1:{server.server_address[1]}"
        settings.PLINTH_PLAYGROUND_UPSTREAM = "gateway"
        response = alice.post("/endpoints/chat/playground/chat/", {"key": "pli_k", "prompt": "x"})
        stream = b"".join(response).decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    assert shown in stream and "[DONE]" in stream
    assert hidden not in stream


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")
def test_a_multi_turn_chat_sends_the_system_prompt_sampling_and_earlier_turns(
    alice: Client, endpoint: Deployment, fake_gateway: list[dict[str, Any]]
) -> None:
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello"}]
    form = {
        "key": "pli_k", "prompt": "and again", "system": "Be brief.", "temperature": "0.2",
        "top_p": "0.9", "max_tokens": "16", "history": json.dumps(history),
    }  # fmt: skip
    stream = b"".join(alice.post("/endpoints/chat/playground/chat/", form)).decode()
    [call] = fake_gateway
    assert call["body"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        *history,
        {"role": "user", "content": "and again"},
    ]
    assert call["body"]["temperature"] == 0.2 and call["body"]["top_p"] == 0.9
    assert call["revision"] is None  # not pinned unless the page asks
    # The stream opens with the exact request for "View code", the key left out.
    first = json.loads(stream.split("\n\n")[0].removeprefix("data: "))
    shown = first["plinth"]["request"]
    assert shown["body"] == call["body"]
    assert shown["url"].endswith("/endpoints/chat/v1/chat/completions")
    assert shown["headers"] == {"Authorization": "Bearer $PLINTH_API_KEY"}
    assert "pli_k" not in stream


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", "2.5"),
        ("temperature", "warm"),
        ("top_p", "1.5"),
        ("system", "x" * (LIMITS["system"] + 1)),
        ("history", "not json"),
        ("history", json.dumps([{"role": "system", "content": "sneaky"}])),
        ("history", json.dumps([{"role": "user", "content": "x"}] * (LIMITS["turns"] + 1))),
        ("revision", "7"),  # no such revision serves
        ("revision", "one"),
    ],
)
def test_every_chat_setting_is_checked_and_named(
    alice: Client, endpoint: Deployment, field: str, value: str
) -> None:
    assert _refused(alice, {"key": "pli_k", "prompt": "hi", field: value}) == [field]


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume")
def test_a_pinned_revision_travels_in_the_revision_header(
    alice: Client, endpoint: Deployment, fake_gateway: list[dict[str, Any]]
) -> None:
    Deployment.objects.filter(pk=endpoint.pk).update(current_revision=endpoint.target_revision)
    form = {"key": "pli_k", "prompt": "hi", "revision": "1"}
    stream = b"".join(alice.post("/endpoints/chat/playground/chat/", form)).decode()
    [call] = fake_gateway
    assert call["revision"] == "1"
    assert '"revision": 1' in stream  # the page labels the reply with the revision that answered


def test_comparing_with_another_endpoint_widens_the_temporary_key_to_both(
    alice: Client, cast: Cast, endpoint: Deployment
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    other = services.create_deployment(actor, slug="other", name="Other", spec=SPEC)
    page = alice.get("/endpoints/chat/").content.decode()
    assert 'value="endpoint:other"' in page  # offered in the side-by-side choice
    alice.post("/endpoints/chat/playground/key/", {"compare": "endpoint:other"}, **HTMX)
    key = ApiKey.objects.get()
    assert set(key.allowed_deployment_ids) == {endpoint.pk, other.pk}


def test_a_compare_choice_cannot_reach_another_orgs_endpoint(
    alice: Client, cast: Cast, endpoint: Deployment
) -> None:
    services.create_deployment(
        cast.actor(cast.bob, cast.globex), slug="theirs", name="T", spec=SPEC
    )
    alice.post("/endpoints/chat/playground/key/", {"compare": "endpoint:theirs"}, **HTMX)
    assert ApiKey.objects.get().allowed_deployment_ids == [endpoint.pk]
