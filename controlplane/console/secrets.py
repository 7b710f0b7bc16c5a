"""The secrets page: the organization's secrets (names and descriptions, for developers and up),
saving and deleting one. Each POST is one ``controlplane.services`` call."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from controlplane import services
from controlplane.access import require_role
from controlplane.console.forms import error_context, form_page, posted
from controlplane.guard import actor_of, console_view
from controlplane.models import Role, Secret
from controlplane.services import ServiceError


def _secrets_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    actor = actor_of(request)
    # As in the API: secret names and descriptions are for developers and up.
    require_role(actor, Role.DEVELOPER)
    secrets = Secret.objects.filter(organization=actor.organization).only(
        "id", "name", "description", "updated_at"
    )
    return form_page(request, "controlplane/secrets.html", {"secrets": secrets}, extra)


@require_http_methods(["GET", "POST"])
@console_view
def secret_list(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _secrets_page(request)
    form = posted(request, "name", "description")
    try:
        services.set_secret(
            actor_of(request),
            name=form["name"],
            value=request.POST.get("value", ""),
            description=form["description"],
        )
    except ServiceError as exc:
        return _secrets_page(request, form=form, error=error_context(exc))
    messages.success(request, f"Secret {form['name']} saved.")
    return redirect("secret-list")


@require_POST
@console_view
def secret_delete(request: HttpRequest, secret_id: str) -> HttpResponse:
    services.delete_secret(actor_of(request), secret_id=secret_id)
    return redirect("secret-list")
