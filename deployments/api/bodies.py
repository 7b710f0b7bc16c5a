"""What /api/v1 takes as a request body, and the 4xx for anything else, before a route runs.

The API takes JSON only: UTF-8 text of one JSON document, up to ``DATA_UPLOAD_MAX_MEMORY_SIZE``,
sent as ``application/json`` (or an ``application/*+json`` type, or with no Content-Type at all).
A form (``curl -F`` or ``curl -d``), plain text, XML or any other type is refused whole with 415
naming the type sent, whatever the route; bytes that are not UTF-8 or not JSON get 400 saying where
they broke. Checked here, once for every route, so no route or layer around it (idempotency hashes
the body) meets a body it cannot read.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse

from controlplane.error_pages import error_response
from controlplane.hygiene import displayable

JSON_TYPE = "application/json"
CONTENT_TYPE = "Content-Type"
_UTF8 = ("utf-8", "utf8")


def body_refusal(request: HttpRequest) -> HttpResponse | None:
    """The 4xx for a body the API does not take, or None (an empty body is the route's to judge)."""
    too_large = _size_refusal(request)
    if too_large is not None or not request.body:
        return too_large
    media_type = _media_problem(request)
    if media_type is not None:
        return _unsupported(media_type)
    problem = _json_problem(request.body)
    if problem is not None:
        return error_response(400, f"the request body is not valid JSON: {problem}")
    return None


def _content_length(request: HttpRequest) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _size_refusal(request: HttpRequest) -> HttpResponse | None:
    if _content_length(request) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        limit_kib = settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024
        return error_response(413, f"the request body is larger than {limit_kib} KiB")
    try:
        request.body  # noqa: B018 (reading it is the check)
    except RequestDataTooBig:  # chunked uploads carry no Content-Length
        return error_response(413, "the request body is larger than the limit")
    return None


def _media_problem(request: HttpRequest) -> str | None:
    """The body's declared type when the API does not take it (for the message), or None."""
    media_type = (request.content_type or "").lower()
    is_json = media_type == JSON_TYPE or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )
    if media_type and not is_json:
        return displayable(media_type)[:200]
    charset = (request.content_params or {}).get("charset", "utf-8")
    if charset.lower() not in _UTF8:
        return displayable(f"{media_type or JSON_TYPE}; charset={charset}")[:200]
    return None


def _unsupported(sent: str) -> HttpResponse:
    fix = f"send the body as UTF-8 JSON with '{CONTENT_TYPE}: {JSON_TYPE}'"
    return error_response(
        415,
        f"the API takes JSON request bodies only; this one was sent as {sent}",
        fields=[
            {
                "field": CONTENT_TYPE,
                "code": "unsupported_media_type",
                "message": f"is {sent}",
                "fix": fix,
            }
        ],
    )


def _json_problem(body: bytes) -> str | None:
    """Where ``body`` stops being UTF-8 JSON, in words, or None."""
    try:
        text = body.decode("utf-8-sig")  # a byte order mark is tolerated, as ninja's parser does
    except UnicodeDecodeError as exc:
        return f"byte {exc.start} (0x{body[exc.start]:02x}) is not UTF-8"
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{exc.msg} at line {exc.lineno}, column {exc.colno}"
    except RecursionError:
        return "it is nested too deeply"
    return None
