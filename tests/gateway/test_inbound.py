"""Body checks and the include_usage request the gateway adds to streams (no server needed)."""

from __future__ import annotations

import json

import pytest

from gateway.errors import GatewayError
from gateway.inbound import ROUTES, prepare

CHAT = ROUTES["/v1/chat/completions"]


def test_a_stream_asks_for_usage_with_the_clients_bytes_kept_as_they_were():
    # Spacing, key order and a number Python's float would round all survive: only the
    # stream_options member is added before the closing brace.
    body = b'{"model": "m",  "stream": true, "seed": 123456789012345678901234567890}\n '

    prepared = prepare(CHAT, body)

    assert prepared.stream and prepared.strip_usage_chunk
    assert prepared.body.startswith(body.rstrip()[:-1])
    assert json.loads(prepared.body) == {
        "model": "m",
        "stream": True,
        "seed": 123456789012345678901234567890,
        "stream_options": {"include_usage": True},
    }


def test_stream_options_given_without_usage_get_it_added_and_keep_the_rest():
    for options in (None, {"continuous_usage_stats": False}):
        body = json.dumps({"model": "m", "stream": True, "stream_options": options}).encode()

        prepared = prepare(CHAT, body)

        assert prepared.strip_usage_chunk
        expected = {**(options or {}), "include_usage": True}
        assert json.loads(prepared.body)["stream_options"] == expected


def test_a_client_that_asked_for_usage_and_unary_requests_go_up_unchanged():
    asked = b'{"model": "m", "stream": true, "stream_options": {"include_usage": true}}'
    unary = b'{"model": "m", "messages": []}'

    assert (prepare(CHAT, asked).body, prepare(CHAT, asked).strip_usage_chunk) == (asked, False)
    assert (prepare(CHAT, unary).body, prepare(CHAT, unary).stream) == (unary, False)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"[" * 5000 + b"]" * 5000, "invalid_json"),
        (b'{"model": "m", "temperature": NaN}', "invalid_json"),
        (b"\xff\xfe", "invalid_json"),
        (b'{"model": "m", "stream": true, "stream_options": 3}', "invalid_value"),
        (b'{"stream": true}', "missing_model"),
    ],
)
def test_bodies_the_gateway_cannot_forward_are_refused_with_a_400(body, code):
    with pytest.raises(GatewayError) as refused:
        prepare(CHAT, body)

    assert (refused.value.status, refused.value.code) == (400, code)
