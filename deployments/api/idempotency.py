"""``Idempotency-Key`` on POST: a retried request gets the first response instead of a second
effect (a second endpoint, a second key).

Keys are scoped to the caller: one management key, or one signed-in user, in one organization.
Another caller who sends the same key (say a viewer who saw an admin's request) runs their own
request under their own role and never gets the first caller's response. A replay is authorized
first: the caller must still hold the role the first request ran with (a user demoted since
then gets 403, not the old 201). Records are kept a day. The row is claimed before the request
runs, so two concurrent requests with one key cannot both act: the second is told the first is
still in progress (409). Reusing a key for a different request is refused (422).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from controlplane.access import AccessDenied, Actor
from controlplane.error_pages import error_response
from deployments.api.models import IdempotencyRecord

HEADER = "Idempotency-Key"
LIFETIME = timedelta(hours=24)
# A claim this old belongs to a request that died mid-way; let a retry take it over.
ABANDONED_AFTER = timedelta(minutes=5)
MAX_KEY_LENGTH = 255


def _body_hash(request: HttpRequest) -> str:
    # Keyed, because a body may carry a secret's value: a plain hash would let a low-entropy
    # value be guessed offline from the database.
    return hmac.new(settings.SECRET_KEY.encode(), request.body, hashlib.sha256).hexdigest()


def mark_secret(response: HttpResponse, object_id: str) -> None:
    """Flag a response that carries a value shown once (a new API key): never stored, so a
    replay answers 409 naming the object instead of returning the value again."""
    # An attribute of our own on the response, read back by the idempotency layer.
    response.plinth_shown_once = object_id  # type: ignore[attr-defined]


def _remember(record: IdempotencyRecord, response: HttpResponse) -> None:
    shown_once = getattr(response, "plinth_shown_once", None)
    if shown_once is not None:
        replay = error_response(
            409,
            f"the first request with this Idempotency-Key created {shown_once}; its secret "
            "value is shown only once, so it cannot be replayed (revoke it and create another "
            "if it was lost)",
            code="idempotent_secret_not_replayable",
        )
        record.status_code, record.response_body = replay.status_code, replay.content
    else:
        record.status_code, record.response_body = response.status_code, response.content
    record.content_type = "application/json"
    record.save(update_fields=["status_code", "response_body", "content_type"])


def caller_of(actor: Actor) -> str:
    """Whose records these are: the management key, else the signed-in user."""
    if actor.api_key is not None:
        return f"key:{actor.api_key.pk}"
    if actor.user is not None:
        return f"user:{actor.user.pk}"
    return "system"


def _records(actor: Actor) -> QuerySet[IdempotencyRecord]:
    return IdempotencyRecord.objects.filter(
        organization=actor.organization, caller=caller_of(actor)
    )


def _claim(actor: Actor, request: HttpRequest, key: str) -> IdempotencyRecord | None:
    """A new claim for this key (None when this caller already has a record for it)."""
    now = timezone.now()
    IdempotencyRecord.objects.filter(organization=actor.organization, expires_at__lt=now).delete()
    _records(actor).filter(key=key, status_code=None, created_at__lt=now - ABANDONED_AFTER).delete()
    try:
        with transaction.atomic():
            return IdempotencyRecord.objects.create(
                organization=actor.organization,
                caller=caller_of(actor),
                role=actor.role,
                key=key,
                method=request.method or "POST",
                path=request.path[:500],
                body_hash=_body_hash(request),
                expires_at=now + LIFETIME,
            )
    except IntegrityError:
        return None


def _replay(actor: Actor, request: HttpRequest, key: str) -> HttpResponse:
    record = _records(actor).filter(key=key).first()
    # Authorize before answering anything: what was stored is what that role was allowed to do.
    if record is not None and record.role and not actor.has_role(record.role):
        return error_response(403, str(AccessDenied(record.role, actor.role)))
    if record is None or record.status_code is None:
        return error_response(
            409,
            "a request with this Idempotency-Key is still in progress; retry shortly",
            code="idempotency_in_progress",
        )
    if (record.method, record.path, record.body_hash) != (
        request.method,
        request.path[:500],
        _body_hash(request),
    ):
        return error_response(
            422,
            "this Idempotency-Key was used for a different request; use a new key",
            code="idempotency_key_reused",
            fields=[{"field": HEADER, "code": "reused", "message": "key reused", "fix": None}],
        )
    response = HttpResponse(
        bytes(record.response_body), status=record.status_code, content_type=record.content_type
    )
    response["Idempotent-Replayed"] = "true"
    return response


def run_once(
    actor: Actor, request: HttpRequest, key: str, view: Callable[[], HttpResponse]
) -> HttpResponse:
    """Run ``view`` the first time this key is seen; replay its response afterwards."""
    if not key or len(key) > MAX_KEY_LENGTH:
        return error_response(
            422,
            f"{HEADER} must be 1-{MAX_KEY_LENGTH} characters",
            fields=[{"field": HEADER, "code": "invalid", "message": "bad length", "fix": None}],
        )
    record = _claim(actor, request, key)
    if record is None:
        return _replay(actor, request, key)
    try:
        response = view()
    except BaseException:
        record.delete()
        raise
    # Server errors and rate limits are worth retrying for real, so they are not remembered.
    if response.status_code >= 500 or response.status_code == 429:
        record.delete()
        return response
    _remember(record, response)
    return response
