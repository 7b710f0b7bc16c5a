"""The console's API keys page: create a key (an inference key scoped with a searchable endpoint
picker, optional per-minute limits), see it once inside ready-to-run snippets for a chosen
endpoint, list every key with its last day's usage and limits, change those limits, and revoke
keys, the playground's temporary ones included.

Each POST is one ``controlplane.services`` call; a refused request re-renders the page with the
message next to the field it names (status 422). The plaintext of a new key survives one page
view, encrypted in the session (post/redirect/get), on a page that is never cached.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any

from django.contrib import messages
from django.db.models import F, Sum
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST

from controlplane import crypto, services
from controlplane.access import Actor
from controlplane.guard import actor_of, console_view
from controlplane.models import ApiKey, ApiKeyKind, Role
from controlplane.services import CreatedKey, ServiceError
from deployments.models import Deployment, UsageRecord
from deployments.views.endpoints import inference_url
from deployments.views.organization import _error, _form, _form_page

# The session slot holding a just-created key until the page after the redirect shows it.
CREATED_KEY_SLOT = "plinth.created_key"
# How far back the list's usage columns look.
USAGE_WINDOW = timedelta(hours=24)
# The most endpoints a new key's snippets are offered for (the picker lists them all).
SNIPPET_ENDPOINTS = 50
# ASCII digits only: int() would also take " 12", "1_000" and other scripts' digits.
_WHOLE_NUMBER = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True)
class KeyRow:
    """One key in the list with what it did over ``USAGE_WINDOW``."""

    key: ApiKey
    requests: int
    tokens: int


@dataclass(frozen=True)
class SnippetTarget:
    """An endpoint a new key's snippets can be written for."""

    slug: str
    name: str
    base_url: str
    model: str


def _usage_by_key(actor: Actor) -> dict[uuid.UUID, tuple[int, int]]:
    since = timezone.now() - USAGE_WINDOW
    rows = (
        UsageRecord.objects.filter(organization=actor.organization, minute__gte=since)
        .values("api_key_id")
        .annotate(requests=Sum("requests"), tokens=Sum(F("prompt_tokens") + F("completion_tokens")))
    )
    return {r["api_key_id"]: (r["requests"] or 0, r["tokens"] or 0) for r in rows}


def _rows(keys: Any, usage: dict[uuid.UUID, tuple[int, int]]) -> list[KeyRow]:
    return [KeyRow(k, *usage.get(k.pk, (0, 0))) for k in keys]


def _endpoints(actor: Actor) -> Any:
    # Endpoint choices for scoping a key: a read of the domain's table, no service call.
    return (
        Deployment.objects.filter(organization=actor.organization)
        .exclude(desired_state="deleted")
        .select_related("target_revision")
        .only("id", "slug", "name", "target_revision__spec")
        .order_by("slug")
    )


def _served_model(endpoint: Deployment) -> str:
    spec = endpoint.target_revision.spec if endpoint.target_revision else {}
    model = spec.get("model") or {}
    return str(model.get("served_name") or model.get("source") or "") if model else ""


def snippet_targets(endpoints: Any, key: ApiKey) -> list[SnippetTarget]:
    """The endpoints a key can call, for its snippets: its scope, else every endpoint."""
    allowed = [e for e in endpoints if key.allows_deployment(e.pk)]
    return [
        SnippetTarget(e.slug, e.name, inference_url(e.slug), _served_model(e))
        for e in allowed[:SNIPPET_ENDPOINTS]
    ]


def _key_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    actor = actor_of(request)
    listed = ApiKey.objects.filter(organization=actor.organization).select_related("created_by")
    usage = _usage_by_key(actor)
    now = timezone.now()
    endpoints = list(_endpoints(actor))
    created: CreatedKey | None = extra.get("created")
    context = {
        "rows": _rows(listed.filter(is_temporary=False), usage),
        # Playground keys: listed while they still work, so they can be revoked early.
        "playground_rows": _rows(
            listed.filter(is_temporary=True, revoked_at__isnull=True, expires_at__gt=now), usage
        ),
        "endpoints": endpoints,
        "kinds": ApiKeyKind.choices,
        "roles": [r for r in Role.choices if r[0] != Role.OWNER],
        "usage_hours": int(USAGE_WINDOW.total_seconds() // 3600),
        "snippets": snippet_targets(endpoints, created.api_key) if created else [],
    }
    return _form_page(request, "controlplane/keys.html", context, extra)


@require_http_methods(["GET", "POST"])
@console_view
def key_list(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        created = _take_created_key(request, actor_of(request))
        if created is None:
            return _key_page(request)
        response = _key_page(request, created=created)
        # The one page that holds a plaintext key: no cache, no back-button copy of it.
        add_never_cache_headers(response)  # no-store among them
        return response
    form = _form(request, "name", "kind", "role", "expires", "rpm", "tpm")
    management = form["kind"] == ApiKeyKind.MANAGEMENT
    try:
        created = services.create_api_key(
            actor_of(request),
            name=form["name"],
            kind=form["kind"],
            # The role field is for management keys only; an inference key has no role.
            role=(form["role"] or Role.DEVELOPER) if management else Role.DEVELOPER,
            allowed_deployment_ids=_uuids(request.POST.getlist("endpoints")),
            expires_at=_date(form["expires"]),
            requests_per_minute=_limit(form["rpm"], "requests_per_minute"),
            tokens_per_minute=_limit(form["tpm"], "tokens_per_minute"),
        )
    except ServiceError as exc:
        chosen = request.POST.getlist("endpoints")
        return _key_page(request, form=form, chosen=chosen, error=_error(exc))
    _hold_created_key(request, created)
    # Post/redirect/get: reloading the page that shows the key must not create another one.
    return HttpResponseRedirect(reverse("key-list"), status=303)


def _hold_created_key(request: HttpRequest, created: CreatedKey) -> None:
    """Keep the plaintext for exactly one page view, encrypted: the session is a table row."""
    request.session[CREATED_KEY_SLOT] = {
        "id": str(created.api_key.pk),
        "sealed": crypto.encrypt(created.plaintext),
    }


def _take_created_key(request: HttpRequest, actor: Actor) -> CreatedKey | None:
    """The key held by ``_hold_created_key``, removed from the session as it is read."""
    held = request.session.pop(CREATED_KEY_SLOT, None)
    if not isinstance(held, dict) or not isinstance(held.get("id"), str):
        return None
    # Scoped like every read: after an organization switch the key is not shown there.
    key = ApiKey.objects.filter(pk=held["id"], organization=actor.organization).first()
    if key is None:
        return None
    try:
        plaintext = crypto.decrypt(str(held.get("sealed", "")))
    except crypto.SecretDecryptionError:
        return None
    return CreatedKey(api_key=key, plaintext=plaintext)


def _uuids(values: list[str]) -> list[uuid.UUID]:
    try:
        return [uuid.UUID(v) for v in values if v]
    except ValueError:
        raise ServiceError("unknown endpoint", field="endpoints") from None


def _date(raw: str) -> datetime | None:
    if not raw:
        return None
    try:
        day = datetime.strptime(raw, "%Y-%m-%d").date()
    except ValueError:
        raise ServiceError("expiry: use a date like 2030-01-31", field="expires_at") from None
    return timezone.make_aware(datetime.combine(day, time.max))


def _limit(raw: str, field: str) -> int | None:
    """A per-minute limit from a form: empty is none; anything but a whole number is refused."""
    if not raw:
        return None
    if not _WHOLE_NUMBER.fullmatch(raw) or not 1 <= int(raw) <= 1_000_000_000:
        raise ServiceError(
            f"{field.replace('_', ' ')}: enter a whole number from 1, or leave it empty",
            field=field,
        )
    return int(raw)


@require_POST
@console_view
def key_limits(request: HttpRequest, key_id: str) -> HttpResponse:
    """Set or lift a key's requests and tokens per minute from its row in the list."""
    form = _form(request, "rpm", "tpm")
    try:
        key = services.set_api_key_limits(
            actor_of(request),
            key_id=key_id,
            requests_per_minute=_limit(form["rpm"], "requests_per_minute"),
            tokens_per_minute=_limit(form["tpm"], "tokens_per_minute"),
        )
    except ServiceError as exc:
        return _key_page(request, limits_for=key_id, error=_error(exc))
    messages.success(request, f"Limits of {key.name} ({key.prefix}…) saved.")
    return redirect("key-list")


@require_POST
@console_view
def key_revoke(request: HttpRequest, key_id: str) -> HttpResponse:
    key = services.revoke_api_key(actor_of(request), key_id=key_id)
    messages.success(request, f"Key {key.name} ({key.prefix}…) revoked.")
    return redirect("key-list")
