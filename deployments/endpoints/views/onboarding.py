"""The console's first-run help: the endpoint page's "call it now" card, shown once the endpoint
is active to an organization that has no inference key yet, with the endpoint's URL, a snippet,
and one button that makes a key limited to it (the key page then shows the key inside the
snippets, ready to copy). The empty endpoint list's three steps and templates are in its
template (``deployments/_onboarding.html``).

While the endpoint is not active the card is an empty placeholder that polls; it stops polling
(htmx's 286) once it has something to say, or nothing left to say.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django_htmx.http import HTMX_STOP_POLLING

from controlplane.access import Actor
from controlplane.guard import actor_of, console_view
from controlplane.models import ApiKey, ApiKeyKind, Role
from deployments.endpoints import queries
from deployments.endpoints.models import Deployment
from deployments.endpoints.queries import inference_url


def needs_first_key(actor: Actor) -> bool:
    """True while the organization has never had a lasting inference key (playground keys do
    not count): its first endpoint's page still offers the way to call it."""
    if not actor.has_role(Role.DEVELOPER):
        return False
    return not ApiKey.objects.filter(
        organization=actor.organization, kind=ApiKeyKind.INFERENCE, is_temporary=False
    ).exists()


def first_call_context(actor: Actor, endpoint: Deployment) -> dict[str, object]:
    spec = endpoint.target_revision.spec if endpoint.target_revision else {}
    model = spec.get("model") or {}
    wanted = needs_first_key(actor)
    return {
        "endpoint": endpoint,
        "first_call": wanted,
        "first_call_ready": wanted and endpoint.status == "active",
        "base_url": inference_url(endpoint.slug),
        "served_model": str(model.get("served_name") or model.get("source") or ""),
    }


@require_GET
@console_view
def first_call(request: HttpRequest, slug: str) -> HttpResponse:
    """The card's poll: the placeholder again until the endpoint is active, then the card."""
    endpoint = queries.get_endpoint(actor_of(request), slug)
    context = first_call_context(actor_of(request), endpoint)
    response = render(request, "deployments/_first_call.html", context)
    if context["first_call_ready"] or not context["first_call"]:
        response.status_code = HTMX_STOP_POLLING
    return response
