"""Console pages of the organization's own state: API keys, members and roles, secrets, the
audit log.

Each POST is one ``controlplane.services`` (or ``controlplane.invitations``) call; a refused
request re-renders the page with the message next to the field it names (status 422), never a
traceback. They live with the console's other pages, above the platform layer, because the key
page offers the organization's endpoints to scope a key to.
"""

from __future__ import annotations

import uuid
from datetime import datetime, time
from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from controlplane import audit, crypto, invitations, services
from controlplane.access import Actor, require_role
from controlplane.guard import actor_of, console_view
from controlplane.models import ApiKey, ApiKeyKind, AuditEvent, Membership, Role, Secret
from controlplane.services import CreatedKey, ServiceError
from deployments.models import Deployment


def _form(request: HttpRequest, *names: str) -> dict[str, str]:
    return {name: request.POST.get(name, "").strip() for name in names}


def _error(exc: ServiceError) -> dict[str, str]:
    return {"field": exc.field or "", "message": exc.detail}


# --- API keys ----------------------------------------------------------------------------------


def _key_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    actor = actor_of(request)
    keys = ApiKey.objects.filter(organization=actor.organization, is_temporary=False)
    # Endpoint choices for scoping a key: a read of the domain's table, no service call.
    endpoints = Deployment.objects.filter(organization=actor.organization).exclude(
        desired_state="deleted"
    )
    context = {
        "keys": keys.select_related("created_by"),
        "endpoints": endpoints.only("id", "slug"),
        "kinds": ApiKeyKind.choices,
        "roles": [r for r in Role.choices if r[0] != Role.OWNER],
    }
    return _form_page(request, "controlplane/keys.html", context, extra)


# The session slot holding a just-created key until the page after the redirect shows it.
CREATED_KEY_SLOT = "plinth.created_key"


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
    form = _form(request, "name", "kind", "role", "expires")
    try:
        created = services.create_api_key(
            actor_of(request),
            name=form["name"],
            kind=form["kind"],
            role=form["role"] or Role.DEVELOPER,
            allowed_deployment_ids=_uuids(request.POST.getlist("endpoints")),
            expires_at=_date(form["expires"]),
        )
    except ServiceError as exc:
        return _key_page(request, form=form, error=_error(exc))
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


@require_POST
@console_view
def key_revoke(request: HttpRequest, key_id: str) -> HttpResponse:
    key = services.revoke_api_key(actor_of(request), key_id=key_id)
    messages.success(request, f"Key {key.name} ({key.prefix}…) revoked.")
    return redirect("key-list")


def _form_page(
    request: HttpRequest, template: str, context: dict[str, Any], extra: dict[str, Any]
) -> HttpResponse:
    """A list page with its create form; ``extra`` carries a refused form and its error (422)."""
    page = {"form": {}, "error": {}, **context, **extra}
    return render(request, template, page, status=422 if page["error"] else 200)


# --- members -------------------------------------------------------------------------------


def _members_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    actor = actor_of(request)
    members = Membership.objects.filter(organization=actor.organization).select_related("user")
    pending = invitations.pending_for_organization(actor) if actor.has_role(Role.ADMIN) else []
    context = {"members": members, "roles": Role.choices, "invitations": pending}
    return _form_page(request, "controlplane/members.html", context, extra)


@require_http_methods(["GET", "POST"])
@console_view
def member_list(request: HttpRequest) -> HttpResponse:
    """Members, and (admins) inviting someone: they join when they accept, never before."""
    if request.method == "GET":
        return _members_page(request)
    form = _form(request, "username", "role")
    try:
        invitation = invitations.invite(
            actor_of(request), username=form["username"], role=form["role"]
        )
    except ServiceError as exc:
        return _members_page(request, form=form, error=_error(exc))
    # The same words whether or not the name exists: nothing here tells who has an account.
    messages.success(
        request,
        f"Invitation for {invitation.username} as {invitation.role} created. They join when "
        f"they sign in and accept it (it expires in {invitations.INVITATION_LIFETIME.days} days).",
    )
    return redirect("member-list")


@require_POST
@console_view
def member_change(request: HttpRequest, membership_id: int) -> HttpResponse:
    actor = actor_of(request)
    try:
        if request.POST.get("action") == "remove":
            services.remove_member(actor, membership_id=membership_id)
        else:
            services.change_member_role(
                actor, membership_id=membership_id, role=request.POST.get("role", "")
            )
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("member-list")


# --- secrets -------------------------------------------------------------------------------


def _secrets_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    actor = actor_of(request)
    # As in the API: secret names and descriptions are for developers and up.
    require_role(actor, Role.DEVELOPER)
    secrets = Secret.objects.filter(organization=actor.organization).only(
        "id", "name", "description", "updated_at"
    )
    return _form_page(request, "controlplane/secrets.html", {"secrets": secrets}, extra)


@require_http_methods(["GET", "POST"])
@console_view
def secret_list(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _secrets_page(request)
    form = _form(request, "name", "description")
    try:
        services.set_secret(
            actor_of(request),
            name=form["name"],
            value=request.POST.get("value", ""),
            description=form["description"],
        )
    except ServiceError as exc:
        return _secrets_page(request, form=form, error=_error(exc))
    messages.success(request, f"Secret {form['name']} saved.")
    return redirect("secret-list")


@require_POST
@console_view
def secret_delete(request: HttpRequest, secret_id: str) -> HttpResponse:
    services.delete_secret(actor_of(request), secret_id=secret_id)
    return redirect("secret-list")


# --- audit log -----------------------------------------------------------------------------


@require_GET
@console_view
def audit_log(request: HttpRequest) -> HttpResponse:
    actor = actor_of(request)
    filters = {k: request.GET.get(k, "").strip()[:100] for k in ("action", "actor", "target")}
    # The API's read (admins only, like GET /api/v1/audit): the page shows every member's changes.
    events = audit.events_for(
        actor, action=filters["action"] or None, actor_label=filters["actor"] or None
    )
    if filters["target"]:
        events = events.filter(target_type__icontains=filters["target"])
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    actions = (
        AuditEvent.objects.filter(organization=actor.organization)
        .order_by("action")
        .values_list("action", flat=True)
        .distinct()
    )
    context = {"page": page, "filters": filters, "actions": list(actions)}
    return render(request, "controlplane/audit.html", context)
