"""The endpoint page's playground: a temporary inference key, and a chat call streamed back.

The browser cannot call the gateway itself (another origin: CORS), so this view forwards the
chat request server-side and streams the upstream SSE bytes back unchanged as they arrive
(an async iterator, so under ASGI no worker thread is held per token). The key travels in the
request body from the page, which holds it the way the key page shows a key once; it is never
logged or stored here. By default the call goes through the gateway, so it is metered like any
other; ``PLINTH_PLAYGROUND_UPSTREAM=router`` calls the endpoint's router directly after the
console checks the key itself (for installations without a gateway process).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from controlplane import services as platform
from controlplane.crypto import engine_api_key
from controlplane.error_pages import error_response
from controlplane.guard import actor_of, console_view
from controlplane.models import ApiKeyKind
from controlplane.services import ServiceError
from deployments import queries
from deployments.models import Deployment
from deployments.views.endpoints import inference_url

# The playground's limits: enforced here, and rendered into the form's attributes from the same
# numbers (the ``playground_limit`` template tag), so the page can never promise more.
LIMITS = {"prompt": 20_000, "max_tokens": 4096, "key": 200}
DEFAULT_MAX_TOKENS = 128
UPSTREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=10.0, pool=5.0)
# A key goes into an Authorization header: letters, digits, "_" and "-" only (ours are).
_KEY_SHAPE = re.compile(r"[A-Za-z0-9_-]+")
# ASCII digits only: int() would also take " 12", "1_000" and other scripts' digits.
_WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")


@require_POST
@console_view
def playground_key(request: HttpRequest, slug: str) -> HttpResponse:
    """A temporary inference key limited to this endpoint (expires within the hour)."""
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    created = platform.create_api_key(
        actor,
        name=f"playground {endpoint.slug}",
        kind=ApiKeyKind.INFERENCE,
        allowed_deployment_ids=[endpoint.pk],
        temporary=True,
    )
    context = {"endpoint": endpoint, "created": created}
    return render(request, "deployments/endpoint_detail.html#playground-key", context)


class PlaygroundInvalid(Exception):
    """The playground's inputs, refused: every field at fault, in the API's error shape."""

    def __init__(self, fields: list[dict[str, Any]]):
        super().__init__(fields[0]["message"])
        self.fields = fields


def _problem(field: str, code: str, message: str, fix: str | None = None) -> dict[str, Any]:
    return {"field": field, "code": code, "message": message, "fix": fix}


def _check_key(raw: str) -> dict[str, Any] | None:
    if not raw:
        return _problem(
            "key", "required", "create a temporary key or paste an inference key", "press Create"
        )
    if len(raw) > LIMITS["key"] or not _KEY_SHAPE.fullmatch(raw):
        return _problem("key", "invalid", "this is not an inference key", "paste a pli_ key")
    return None


def _check_prompt(raw: str) -> dict[str, Any] | None:
    if not raw:
        return _problem("prompt", "required", "write a prompt")
    if len(raw) > LIMITS["prompt"]:
        return _problem(
            "prompt", "too_long", f"prompts are limited to {LIMITS['prompt']} characters"
        )
    return None


def _max_tokens(raw: str) -> int | dict[str, Any]:
    """The requested max tokens, or the problem with it."""
    limit = LIMITS["max_tokens"]
    if not raw:
        return DEFAULT_MAX_TOKENS
    if not _WHOLE_NUMBER.fullmatch(raw):
        return _problem("max_tokens", "invalid_type", "max tokens: enter a whole number", "e.g. 64")
    if not 1 <= int(raw) <= limit:
        return _problem(
            "max_tokens", "out_of_range", f"max tokens must be between 1 and {limit}",
            f"use at most {limit}",
        )  # fmt: skip
    return int(raw)


def _parse(request: HttpRequest) -> dict[str, Any]:
    """The playground's three inputs, each checked against its limit (all problems at once)."""
    key = request.POST.get("key", "").strip()
    prompt = request.POST.get("prompt", "").strip()
    max_tokens = _max_tokens(request.POST.get("max_tokens", "").strip())
    problems = [p for p in (_check_key(key), _check_prompt(prompt)) if p is not None]
    if isinstance(max_tokens, dict):
        problems.append(max_tokens)
    if problems:
        raise PlaygroundInvalid(problems)
    return {"key": key, "prompt": prompt, "max_tokens": max_tokens}


def _upstream(request: HttpRequest, endpoint: Deployment, key: str) -> tuple[str, str]:
    """Where the call goes, and the bearer token it carries there: the user's key to the
    gateway; to the router, which knows no Plinth key, the endpoint's engine key once the
    user's key is checked here."""
    if settings.PLINTH_PLAYGROUND_UPSTREAM != "router":
        return inference_url(endpoint.slug) + "/chat/completions", key
    found = platform.authenticate_key(key, kind=ApiKeyKind.INFERENCE)
    if (
        found is None
        or found.organization_id != actor_of(request).organization.pk
        or not found.allows_deployment(endpoint.pk)
    ):
        raise ServiceError("this key cannot call this endpoint", field="key")
    if not endpoint.router_url:
        raise ServiceError("the endpoint is not serving yet", field="prompt")
    url = endpoint.router_url.rstrip("/") + "/v1/chat/completions"
    return url, engine_api_key(str(endpoint.pk))


@require_POST
@console_view
def playground_chat(request: HttpRequest, slug: str) -> HttpResponse | StreamingHttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    try:
        params = _parse(request)
        url, bearer = _upstream(request, endpoint, params["key"])
    except PlaygroundInvalid as exc:
        return error_response(422, str(exc), code="invalid", fields=exc.fields)
    except ServiceError as exc:
        fields = [_problem(exc.field or "", exc.code, exc.detail)]
        return error_response(422, exc.message, code=exc.code, fields=fields)
    spec = endpoint.target_revision.spec if endpoint.target_revision else {}
    model = spec.get("model", {})
    body = {
        "model": model.get("served_name") or model.get("source", ""),
        "messages": [{"role": "user", "content": params["prompt"]}],
        "max_tokens": params["max_tokens"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = StreamingHttpResponse(_relay(url, bearer, body), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _sse_error(message: str) -> bytes:
    return f"data: {json.dumps({'error': {'message': message}})}\n\ndata: [DONE]\n\n".encode()


async def _relay(url: str, key: str, body: dict[str, Any]) -> AsyncIterator[bytes]:
    headers = {"Authorization": f"Bearer {key}"}
    try:
        async with (
            httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT) as client,
            client.stream("POST", url, json=body, headers=headers) as upstream,
        ):
            if upstream.status_code != 200:
                detail = (await upstream.aread()).decode("utf-8", errors="replace")
                yield _sse_error(_refusal(upstream.status_code, detail))
                return
            async for chunk in upstream.aiter_raw():
                yield chunk
    except httpx.HTTPError as exc:
        yield _sse_error(f"could not reach the endpoint ({type(exc).__name__})")


def _refusal(status: int, detail: str) -> str:
    """What the user sees of a non-200 answer: the gateway's or engine's own message for a 4xx,
    a fixed summary otherwise. A 5xx body (or any body not in the error shape) may come from the
    router and name internal addresses, so it is never shown."""
    if status >= 500:
        return f"the endpoint is unavailable right now (status {status}); try again shortly"
    try:
        return (
            f"the endpoint refused the request ({status}): "
            + str(json.loads(detail)["error"]["message"])[:300]
        )
    except (ValueError, KeyError, TypeError):
        return f"the endpoint refused the request (status {status})"
