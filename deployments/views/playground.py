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
from collections.abc import AsyncIterator
from typing import Any

import httpx
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from controlplane import services as platform
from controlplane.guard import actor_of, console_view
from controlplane.models import ApiKeyKind
from controlplane.services import ServiceError
from deployments import queries
from deployments.models import Deployment
from deployments.views.endpoints import inference_url

MAX_PROMPT_CHARS = 20_000
UPSTREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=10.0, pool=5.0)


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


def _parse(request: HttpRequest) -> dict[str, Any]:
    key = request.POST.get("key", "").strip()
    prompt = request.POST.get("prompt", "").strip()
    if not key:
        raise ServiceError("create a temporary key or paste an inference key", field="key")
    if not prompt:
        raise ServiceError("write a prompt", field="prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise ServiceError(f"prompts are limited to {MAX_PROMPT_CHARS} characters", field="prompt")
    try:
        max_tokens = int(request.POST.get("max_tokens") or 128)
    except ValueError:
        raise ServiceError("max tokens: enter a whole number", field="max_tokens") from None
    if not 1 <= max_tokens <= 4096:
        raise ServiceError("max tokens must be between 1 and 4096", field="max_tokens")
    return {"key": key, "prompt": prompt, "max_tokens": max_tokens}


def _upstream(request: HttpRequest, endpoint: Deployment, key: str) -> str:
    if getattr(settings, "PLINTH_PLAYGROUND_UPSTREAM", "gateway") != "router":
        return inference_url(endpoint.slug) + "/chat/completions"
    found = platform.authenticate_key(key, kind=ApiKeyKind.INFERENCE)
    if (
        found is None
        or found.organization_id != actor_of(request).organization.pk
        or not found.allows_deployment(endpoint.pk)
    ):
        raise ServiceError("this key cannot call this endpoint", field="key")
    if not endpoint.router_url:
        raise ServiceError("the endpoint is not serving yet", field="prompt")
    return endpoint.router_url.rstrip("/") + "/v1/chat/completions"


@require_POST
@console_view
def playground_chat(request: HttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    try:
        params = _parse(request)
        url = _upstream(request, endpoint, params["key"])
    except ServiceError as exc:
        return JsonResponse({"error": {"message": exc.message, "field": exc.field}}, status=400)
    spec = endpoint.target_revision.spec if endpoint.target_revision else {}
    model = spec.get("model", {})
    body = {
        "model": model.get("served_name") or model.get("source", ""),
        "messages": [{"role": "user", "content": params["prompt"]}],
        "max_tokens": params["max_tokens"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    response = StreamingHttpResponse(
        _relay(url, params["key"], body), content_type="text/event-stream"
    )
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
                yield _sse_error(f"upstream answered {upstream.status_code}: {_message(detail)}")
                return
            async for chunk in upstream.aiter_raw():
                yield chunk
    except httpx.HTTPError as exc:
        yield _sse_error(f"could not reach the endpoint ({type(exc).__name__})")


def _message(detail: str) -> str:
    try:
        return str(json.loads(detail)["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return detail[:300]
