"""The console's API keys page: create a key (an inference key scoped with an endpoint picker
searched on the server, optional per-minute limits), see it once inside ready-to-run snippets for
a chosen endpoint, list the keys a page at a time (searched by name or prefix) with their last
day's usage and limits, change those limits (and a key's priority and weight under overload), and
revoke keys, the playground's temporary ones
included.

The page's query count and size stay flat however many keys and endpoints the organization has
(issue 18 item 10): both key tables are paginated in SQL, usage is summed for the shown keys
only, and the picker offers ``PICKER_CHOICES`` endpoints, more by typing (``key_endpoint_choices``,
an htmx partial), with the ticked ones kept in the form apart from the results.

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
from django.core.paginator import Page, Paginator
from django.db.models import F, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from controlplane import crypto, services
from controlplane.access import Actor
from controlplane.console.forms import error_context, form_page, posted
from controlplane.guard import actor_of, console_view
from controlplane.models import MAX_KEY_WEIGHT, ApiKey, ApiKeyKind, KeyPriority, Role
from controlplane.services import CreatedKey, ServiceError
from deployments.endpoints.models import Deployment
from deployments.endpoints.queries import inference_url
from deployments.traffic.models import UsageRecord

# The session slot holding a just-created key until the page after the redirect shows it.
CREATED_KEY_SLOT = "plinth.created_key"
# How far back the list's usage columns look.
USAGE_WINDOW = timedelta(hours=24)
# The most endpoints a new key's snippets are offered for.
SNIPPET_ENDPOINTS = 50
# Keys per page of the key list, and of the playground keys' list under it.
KEYS_PER_PAGE = 50
PLAYGROUND_KEYS_PER_PAGE = 10
# The most endpoints the picker offers at once; typing searches the rest on the server.
PICKER_CHOICES = 20
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


def _usage_by_key(actor: Actor, key_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[int, int]]:
    """Requests and tokens of each listed key over ``USAGE_WINDOW``: one query for the page."""
    if not key_ids:
        return {}
    since = timezone.now() - USAGE_WINDOW
    rows = (
        UsageRecord.objects.filter(
            organization=actor.organization, minute__gte=since, api_key_id__in=key_ids
        )
        .values("api_key_id")
        .annotate(requests=Sum("requests"), tokens=Sum(F("prompt_tokens") + F("completion_tokens")))
    )
    return {r["api_key_id"]: (r["requests"] or 0, r["tokens"] or 0) for r in rows}


def _rows(keys: list[ApiKey], usage: dict[uuid.UUID, tuple[int, int]]) -> list[KeyRow]:
    return [KeyRow(k, *usage.get(k.pk, (0, 0))) for k in keys]


def _searched_keys(keys: QuerySet[ApiKey], search: str) -> QuerySet[ApiKey]:
    """Keys whose name holds ``search`` or whose prefix starts with it (what a log line shows)."""
    if not search:
        return keys
    return keys.filter(Q(name__icontains=search) | Q(prefix__startswith=search.rstrip("…")))


def _endpoints(actor: Actor) -> QuerySet[Deployment]:
    # Endpoint choices for scoping a key: a read of the domain's table, no service call.
    return (
        Deployment.objects.filter(organization=actor.organization)
        .exclude(desired_state="deleted")
        .select_related("target_revision")
        .only("id", "slug", "name", "target_revision__spec")
        .order_by("slug")
    )


def _chosen_ids(values: list[str]) -> list[uuid.UUID]:
    """The well-formed endpoint ids among ticked values (a refused form re-shows these)."""
    chosen = []
    for value in values:
        try:
            chosen.append(uuid.UUID(value))
        except ValueError:
            continue
    return chosen


def endpoint_choices(actor: Actor, search: str, chosen: list[uuid.UUID]) -> tuple[list[Any], int]:
    """Up to ``PICKER_CHOICES`` endpoints matching ``search`` (name or slug) that are not ticked
    already, and how many match in all: two queries whatever the number of endpoints."""
    rows = _endpoints(actor).exclude(pk__in=chosen)
    if search:
        rows = rows.filter(Q(name__icontains=search) | Q(slug__icontains=search.lower()))
    return list(rows[:PICKER_CHOICES]), rows.count()


def _served_model(endpoint: Deployment) -> str:
    spec = endpoint.target_revision.spec if endpoint.target_revision else {}
    model = spec.get("model") or {}
    return str(model.get("served_name") or model.get("source") or "") if model else ""


def snippet_targets(actor: Actor, key: ApiKey) -> list[SnippetTarget]:
    """The endpoints a key can call, for its snippets: its scope, else every endpoint (the first
    ``SNIPPET_ENDPOINTS`` of either, in one query)."""
    endpoints = _endpoints(actor)
    if key.allowed_deployment_ids:
        endpoints = endpoints.filter(
            pk__in=_chosen_ids([str(i) for i in key.allowed_deployment_ids])
        )
    return [
        SnippetTarget(e.slug, e.name, inference_url(e.slug), _served_model(e))
        for e in endpoints[:SNIPPET_ENDPOINTS]
    ]


def _page_of(rows: QuerySet[ApiKey], number: str | None, per_page: int) -> Page[ApiKey]:
    return Paginator(rows, per_page).get_page(number)


def _key_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    actor = actor_of(request)
    listed = ApiKey.objects.filter(organization=actor.organization)
    search = request.GET.get("q", "").strip()
    keys = _page_of(
        _searched_keys(listed.filter(is_temporary=False), search),
        request.GET.get("page"),
        KEYS_PER_PAGE,
    )
    # Playground keys: listed while they still work, so they can be revoked early.
    playground = _page_of(
        listed.filter(is_temporary=True, revoked_at__isnull=True, expires_at__gt=timezone.now()),
        request.GET.get("playground_page"),
        PLAYGROUND_KEYS_PER_PAGE,
    )
    shown = list(keys.object_list) + list(playground.object_list)
    usage = _usage_by_key(actor, [k.pk for k in shown])
    chosen_ids = _chosen_ids(extra.get("chosen", []))
    choices, matching = endpoint_choices(actor, "", chosen_ids)
    created: CreatedKey | None = extra.get("created")
    context = {
        "rows": _rows(list(keys.object_list), usage),
        "keys_page": keys,
        "search": search,
        "playground_rows": _rows(list(playground.object_list), usage),
        "playground_page": playground,
        "choices": choices,
        "choices_matching": matching,
        "chosen_endpoints": list(_endpoints(actor).filter(pk__in=chosen_ids)) if chosen_ids else [],
        "picker_limit": PICKER_CHOICES,
        "kinds": ApiKeyKind.choices,
        "roles": [r for r in Role.choices if r[0] != Role.OWNER],
        "priorities": KeyPriority.choices,
        "max_weight": MAX_KEY_WEIGHT,
        "usage_hours": int(USAGE_WINDOW.total_seconds() // 3600),
        "snippets": snippet_targets(actor, created.api_key) if created else [],
    }
    return form_page(request, "controlplane/keys.html", context, extra)


@require_GET
@console_view
def key_endpoint_choices(request: HttpRequest) -> HttpResponse:
    """The picker's results for what was typed (htmx swaps them in): endpoints already ticked,
    sent along as ``endpoints``, are left out, as they stay in the form apart."""
    actor = actor_of(request)
    search = request.GET.get("endpoint_q", "").strip()
    choices, matching = endpoint_choices(
        actor, search, _chosen_ids(request.GET.getlist("endpoints"))
    )
    context = {
        "choices": choices,
        "choices_matching": matching,
        "picker_limit": PICKER_CHOICES,
        "endpoint_search": search,
    }
    return render(request, "controlplane/_key_endpoint_choices.html", context)


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
    form = posted(
        request, "name", "kind", "role", "expires", "rpm", "tpm", "priority", "weight", "adapters"
    )
    management = form["kind"] == ApiKeyKind.MANAGEMENT
    try:
        created = services.create_api_key(
            actor_of(request),
            name=form["name"],
            kind=form["kind"],
            # The role field is for management keys only; an inference key has no role.
            role=(form["role"] or Role.DEVELOPER) if management else Role.DEVELOPER,
            allowed_deployment_ids=_uuids(request.POST.getlist("endpoints")),
            allowed_adapters=[n for n in form["adapters"].replace(" ", "").split(",") if n],
            expires_at=_date(form["expires"]),
            requests_per_minute=_limit(form["rpm"], "requests_per_minute"),
            tokens_per_minute=_limit(form["tpm"], "tokens_per_minute"),
            **_share(form, management),
        )
    except ServiceError as exc:
        chosen = request.POST.getlist("endpoints")
        return _key_page(request, form=form, chosen=chosen, error=error_context(exc))
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


def _share(form: dict[str, str], management: bool) -> dict[str, Any]:
    """Priority and weight from a form: left empty (or a management key's hidden fields), they
    are not sent, so a new key gets the defaults and a changed key keeps its own."""
    if management:
        return {}
    share: dict[str, Any] = {}
    if form["priority"]:
        share["priority"] = form["priority"]  # the service names the allowed classes
    if form["weight"]:
        if not _WHOLE_NUMBER.fullmatch(form["weight"]):
            raise ServiceError(
                f"weight must be a whole number from 1 to {MAX_KEY_WEIGHT}", field="weight"
            )
        share["weight"] = int(form["weight"])
    return share


@require_POST
@console_view
def key_limits(request: HttpRequest, key_id: str) -> HttpResponse:
    """Set or lift a key's requests and tokens per minute from its row in the list."""
    form = posted(request, "rpm", "tpm", "priority", "weight")
    try:
        key = services.set_api_key_limits(
            actor_of(request),
            key_id=key_id,
            requests_per_minute=_limit(form["rpm"], "requests_per_minute"),
            tokens_per_minute=_limit(form["tpm"], "tokens_per_minute"),
            **_share(form, management=False),
        )
    except ServiceError as exc:
        return _key_page(request, limits_for=key_id, error=error_context(exc))
    messages.success(request, f"Limits of {key.name} ({key.prefix}…) saved.")
    return redirect("key-list")


@require_POST
@console_view
def key_revoke(request: HttpRequest, key_id: str) -> HttpResponse:
    key = services.revoke_api_key(actor_of(request), key_id=key_id)
    messages.success(request, f"Key {key.name} ({key.prefix}…) revoked.")
    return redirect("key-list")
