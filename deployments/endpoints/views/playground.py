"""The endpoint page's playground: a temporary inference key, and a multi-turn chat streamed back
(a system prompt, temperature, top-p and bounded max tokens), optionally pinned to one of the
endpoint's serving revisions so the page can put two revisions (a canary beside its baseline), or
two endpoints, side by side.

The browser cannot call the gateway itself (another origin: CORS), so this view forwards the
chat request server-side and streams the upstream SSE bytes back unchanged as they arrive
(an async iterator, so under ASGI no worker thread is held per token). The key travels in the
request body from the page, which holds it the way the key page shows a key once; it is never
logged or stored here. By default the call goes through the gateway, so it is metered like any
other; ``PLINTH_PLAYGROUND_UPSTREAM=router`` calls the endpoint's router directly after the
console checks the key itself (for installations without a gateway process).

Before the upstream's bytes, the stream carries one event of its own, ``{"plinth": {...}}``: the
exact request (public URL, headers with the key elided, body) for the page's "View code", and the
revision that answered (the gateway's ``X-Plinth-Revision``). Clients of the OpenAI stream shape
skip it: it has no ``choices``.
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
from controlplane.access import Actor, NotFound
from controlplane.crypto import engine_api_key
from controlplane.error_pages import error_response
from controlplane.guard import actor_of, console_view
from controlplane.models import ApiKeyKind
from controlplane.services import ServiceError
from deployments.endpoints import queries
from deployments.endpoints.models import Deployment
from deployments.endpoints.queries import inference_url
from deployments.experiments.queries import running_canary
from runtime.routing_key import ROUTING_KEY_HEADER, routing_key

# The playground's limits: enforced here, and rendered into the form's attributes from the same
# numbers (the ``playground_limit`` template tag), so the page can never promise more.
LIMITS = {
    "prompt": 20_000,
    "max_tokens": 4096,
    "key": 200,
    "system": 4_000,
    "turns": 40,  # earlier messages of the conversation carried with a prompt
    "conversation": 60_000,  # their characters, all together
}
DEFAULT_MAX_TOKENS = 128
# Sampling bounds as OpenAI documents them (SGLang takes the same).
TEMPERATURE_RANGE = (0.0, 2.0)
TOP_P_RANGE = (0.0, 1.0)
REVISION_HEADER = "X-Plinth-Revision"
# Endpoints offered to compare against (the organization's, newest first).
COMPARE_ENDPOINTS = 20
UPSTREAM_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=10.0, pool=5.0)
# A key goes into an Authorization header: letters, digits, "_" and "-" only (ours are).
_KEY_SHAPE = re.compile(r"[A-Za-z0-9_-]+")
# ASCII digits only: int() would also take " 12", "1_000" and other scripts' digits.
_WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")
_DECIMAL = re.compile(r"[0-9]{1,3}(\.[0-9]{1,4})?")


@require_POST
@console_view
def playground_key(request: HttpRequest, slug: str) -> HttpResponse:
    """A temporary inference key limited to this endpoint (expires within the hour), and to
    the endpoint it is compared with when the page names one (``compare=endpoint:<slug>``)."""
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    allowed = [endpoint.pk]
    other = _compared_endpoint(actor, request.POST.get("compare", ""))
    if other is not None and other.pk != endpoint.pk:
        allowed.append(other.pk)
    created = platform.create_api_key(
        actor,
        name=f"playground {endpoint.slug}",
        kind=ApiKeyKind.INFERENCE,
        allowed_deployment_ids=allowed,
        temporary=True,
    )
    context = {"endpoint": endpoint, "created": created}
    return render(request, "deployments/_playground.html#playground-key", context)


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


def _fraction(raw: str, field: str, bounds: tuple[float, float]) -> float | dict[str, Any] | None:
    """An optional sampling number within ``bounds``, or the problem with it."""
    if not raw:
        return None
    low, high = bounds
    if not _DECIMAL.fullmatch(raw) or not low <= float(raw) <= high:
        label = field.replace("_", "-")
        return _problem(
            field, "out_of_range", f"{label} must be a number from {low:g} to {high:g}",
            f"e.g. {high / 2:g}",
        )  # fmt: skip
    return float(raw)


def _check_system(raw: str) -> dict[str, Any] | None:
    if len(raw) > LIMITS["system"]:
        return _problem(
            "system", "too_long", f"system prompts are limited to {LIMITS['system']} characters"
        )
    return None


def _history(raw: str) -> list[dict[str, str]] | dict[str, Any]:
    """The conversation so far (the page keeps it): alternating user and assistant messages."""
    if not raw:
        return []
    problem = _problem(
        "history", "invalid", "the conversation is not a list of user and assistant messages",
        "press Clear to start again",
    )  # fmt: skip
    try:
        turns = json.loads(raw)
    except ValueError:
        return problem
    if not isinstance(turns, list):
        return problem
    if len(turns) > LIMITS["turns"]:
        return _problem(
            "history", "too_long", f"a conversation keeps at most {LIMITS['turns']} messages",
            "press Clear to start again",
        )  # fmt: skip
    messages: list[dict[str, str]] = []
    for turn in turns:
        if not (
            isinstance(turn, dict)
            and turn.get("role") in ("user", "assistant")
            and isinstance(turn.get("content"), str)
        ):
            return problem
        messages.append({"role": turn["role"], "content": turn["content"]})
    if sum(len(m["content"]) for m in messages) > LIMITS["conversation"]:
        return _problem(
            "history", "too_long",
            f"the conversation is over {LIMITS['conversation']} characters",
            "press Clear to start again",
        )  # fmt: skip
    return messages


def _revision(endpoint: Deployment, raw: str) -> int | dict[str, Any] | None:
    """The revision a call is pinned to: one now serving (the current one, or a running
    canary's), else None when the page names none."""
    if not raw:
        return None
    serving = serving_revisions(endpoint)
    if not _WHOLE_NUMBER.fullmatch(raw) or int(raw) not in serving:
        return _problem(
            "revision", "not_serving", f"revision {raw[:12]} is not serving this endpoint",
            "reload the page to see the revisions serving now",
        )  # fmt: skip
    return int(raw)


_FIELDS = ("key", "prompt", "system", "max_tokens", "temperature", "top_p", "history", "revision")


def _parse(request: HttpRequest, endpoint: Deployment) -> dict[str, Any]:
    """The playground's inputs, each checked against its limit (all problems at once)."""
    form = {name: request.POST.get(name, "").strip() for name in _FIELDS}
    key, prompt, system = form["key"], form["prompt"], form["system"]
    checked: dict[str, Any] = {
        "max_tokens": _max_tokens(form["max_tokens"]),
        "temperature": _fraction(form["temperature"], "temperature", TEMPERATURE_RANGE),
        "top_p": _fraction(form["top_p"], "top_p", TOP_P_RANGE),
        "history": _history(form["history"]),
        "revision": _revision(endpoint, form["revision"]),
    }
    problems = [p for p in (_check_key(key), _check_prompt(prompt), _check_system(system)) if p]
    problems += [v for v in checked.values() if isinstance(v, dict)]
    if problems:
        raise PlaygroundInvalid(problems)
    return {"key": key, "prompt": prompt, "system": system, **checked}


def serving_revisions(endpoint: Deployment) -> dict[int, str]:
    """The revisions answering for the endpoint now, by number: the current one, and a running
    canary's (with its pool's router, for router mode)."""
    serving: dict[int, str] = {}
    if endpoint.current_revision is not None:
        serving[endpoint.current_revision.number] = endpoint.router_url
    canary = running_canary(endpoint)
    if canary is not None:
        serving[canary.revision.number] = canary.router_url
    return serving


def _compared_endpoint(actor: Actor, raw: str) -> Deployment | None:
    """The endpoint named by a compare choice ``endpoint:<slug>``, if it is the actor's."""
    kind, _, slug = raw.partition(":")
    if kind != "endpoint" or not slug:
        return None
    try:
        return queries.get_endpoint(actor, slug[:100])
    except NotFound:
        return None


def compare_choices(actor: Actor, endpoint: Deployment) -> dict[str, Any]:
    """What the playground may put beside this endpoint: its canary against the serving
    revision (while one runs), and the organization's other endpoints."""
    canary = running_canary(endpoint)
    others = (
        queries.deployments_of(actor)
        .exclude(pk=endpoint.pk)
        .exclude(desired_state="deleted")
        .order_by("-created_at")[:COMPARE_ENDPOINTS]
    )
    return {"canary": canary, "others": list(others)}


def _body(endpoint: Deployment, params: dict[str, Any]) -> dict[str, Any]:
    """The chat request, exactly as it is sent upstream (and shown under "View code")."""
    spec = endpoint.target_revision.spec if endpoint.target_revision else {}
    model = spec.get("model", {})
    system = [{"role": "system", "content": params["system"]}] if params["system"] else []
    body: dict[str, Any] = {
        "model": model.get("served_name") or model.get("source", ""),
        "messages": [*system, *params["history"], {"role": "user", "content": params["prompt"]}],
        "max_tokens": params["max_tokens"],
    }
    for name in ("temperature", "top_p"):
        if params[name] is not None:
            body[name] = params[name]
    body.update(stream=True, stream_options={"include_usage": True})
    return body


def _upstream(
    request: HttpRequest, endpoint: Deployment, key: str, revision: int | None
) -> tuple[str, str]:
    """Where the call goes, and the bearer token it carries there: the user's key to the
    gateway (which honours the revision pin); to the router, which knows no Plinth key, the
    endpoint's engine key once the user's key is checked here; a pinned revision's own
    router when it is a canary's."""
    if settings.PLINTH_PLAYGROUND_UPSTREAM != "router":
        return inference_url(endpoint.slug) + "/chat/completions", key
    found = platform.authenticate_key(key, kind=ApiKeyKind.INFERENCE)
    if (
        found is None
        or found.organization_id != actor_of(request).organization.pk
        or not found.allows_deployment(endpoint.pk)
    ):
        raise ServiceError("this key cannot call this endpoint", field="key")
    router = serving_revisions(endpoint).get(revision, "") if revision else endpoint.router_url
    if not router:
        raise ServiceError("the endpoint is not serving yet", field="prompt")
    url = router.rstrip("/") + "/v1/chat/completions"
    return url, engine_api_key(str(endpoint.pk))


@require_POST
@console_view
def playground_chat(request: HttpRequest, slug: str) -> HttpResponse | StreamingHttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    try:
        params = _parse(request, endpoint)
        url, bearer = _upstream(request, endpoint, params["key"], params["revision"])
    except PlaygroundInvalid as exc:
        return error_response(422, str(exc), code="invalid", fields=exc.fields)
    except ServiceError as exc:
        fields = [_problem(exc.field or "", exc.code, exc.detail)]
        return error_response(422, exc.message, code=exc.code, fields=fields)
    body = _body(endpoint, params)
    pin = {REVISION_HEADER: str(params["revision"])} if params["revision"] else {}
    shown = {
        "url": inference_url(endpoint.slug) + "/chat/completions",
        "headers": {"Authorization": "Bearer $PLINTH_API_KEY", **pin},
        "body": body,
    }
    headers = dict(pin)
    if settings.PLINTH_PLAYGROUND_UPSTREAM == "router" and (key := routing_key(body)):
        # What the gateway adds: the router places the conversation by it (runtime.routing_key).
        headers[ROUTING_KEY_HEADER] = key
    relay = _relay(url, bearer, body, headers, shown)
    response = StreamingHttpResponse(relay, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _sse_error(message: str) -> bytes:
    return f"data: {json.dumps({'error': {'message': message}})}\n\ndata: [DONE]\n\n".encode()


def _sse_note(note: dict[str, Any]) -> bytes:
    return f"data: {json.dumps({'plinth': note})}\n\n".encode()


async def _relay(
    url: str, key: str, body: dict[str, Any], extra: dict[str, str], shown: dict[str, Any]
) -> AsyncIterator[bytes]:
    headers = {"Authorization": f"Bearer {key}", **extra}
    yield _sse_note({"request": shown})
    try:
        async with (
            httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT) as client,
            client.stream("POST", url, json=body, headers=headers) as upstream,
        ):
            if upstream.status_code != 200:
                detail = (await upstream.aread()).decode("utf-8", errors="replace")
                yield _sse_error(_refusal(upstream.status_code, detail))
                return
            answered = upstream.headers.get(REVISION_HEADER) or extra.get(REVISION_HEADER)
            if answered and answered.isdigit():
                yield _sse_note({"revision": int(answered)})
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
