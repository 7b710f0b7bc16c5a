"""Single sign-on for the console with OpenID Connect (Authlib's client): the start, the
callback and the sign-out.

Start sends the browser to the identity provider with the authorization-code flow, PKCE (S256),
a state and a nonce kept in the session. The callback trades the code for tokens and verifies
the ID token before anything else: its signature against the provider's published keys, its
issuer (the configured one, which the provider's discovery document must name too), its
audience (this console's client id), its nonce, and its times. Only then does
``controlplane.sso_accounts`` find or make the account and set its memberships from the groups.
Sign-out ends the console's session and, where the provider offers an end-session endpoint,
the provider's too.

Settings (settings.py, all from the environment): PLINTH_OIDC_ISSUER turns it on.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.django_client import DjangoOAuth2App, OAuth
from django.conf import settings
from django.contrib.auth import login, logout
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from joserfc.errors import JoseError

from controlplane.sso_accounts import SignInRefused, VerifiedPerson, sign_in

logger = logging.getLogger(__name__)

SESSION_NEXT_KEY = "plinth_sso_next"
SESSION_ID_TOKEN_KEY = "plinth_sso_id_token"  # the hint the provider's end-session asks for


class ProviderAnswerRefused(Exception):
    """The provider's answer is not one Plinth accepts; the message says why, for the page."""


@functools.cache
def _client(issuer: str, client_id: str, client_secret: str, scopes: str) -> DjangoOAuth2App:
    # One per configuration and process: it keeps the provider's discovery document and keys
    # (fetched again when an ID token names a key it has not seen).
    app: DjangoOAuth2App = OAuth().register(
        name="plinth",
        client_id=client_id,
        client_secret=client_secret,
        server_metadata_url=f"{issuer.rstrip('/')}/.well-known/openid-configuration",
        client_kwargs={"scope": scopes, "code_challenge_method": "S256", "timeout": 10},
    )
    return app


def oidc_client() -> DjangoOAuth2App:
    if not settings.SSO_ENABLED:
        raise Http404("single sign-on is not configured")
    return _client(
        settings.PLINTH_OIDC_ISSUER,
        settings.PLINTH_OIDC_CLIENT_ID,
        settings.PLINTH_OIDC_CLIENT_SECRET,
        settings.PLINTH_OIDC_SCOPES,
    )


@require_GET
def sso_start(request: HttpRequest) -> HttpResponse:
    """Off to the identity provider; back at ``sso_callback``."""
    client = oidc_client()
    wanted = request.GET.get("next", "")
    safe = url_has_allowed_host_and_scheme(wanted, {request.get_host()}, request.is_secure())
    request.session[SESSION_NEXT_KEY] = wanted if safe else ""
    try:
        _check_issuer(client)
        return client.authorize_redirect(  # type: ignore[no-any-return]
            request, request.build_absolute_uri(reverse("sso-callback"))
        )
    except requests.RequestException as exc:
        return _provider_unreachable(request, exc)
    except ProviderAnswerRefused as exc:
        return _refused(request, str(exc))


@require_GET
def sso_callback(request: HttpRequest) -> HttpResponse:
    """The provider sends the browser back here with a code (or an error)."""
    client = oidc_client()
    if request.GET.get("error"):  # the provider did not sign the person in (cancelled, refused)
        said = " ".join(filter(None, (request.GET["error"], request.GET.get("error_description"))))
        provider = settings.PLINTH_OIDC_PROVIDER_NAME
        return _refused(request, f"{provider} did not sign you in ({said[:200]}).")
    try:
        token = client.authorize_access_token(request, claims_options=_claims_options())
        person = _person(client, token)
        user = sign_in(person)
    except requests.RequestException as exc:
        return _provider_unreachable(request, exc)
    except (AuthlibBaseError, JoseError, ProviderAnswerRefused) as exc:
        logger.warning("single sign-on answer refused: %s", _reason(exc))
        return _refused(request, f"The sign-in did not verify ({_reason(exc)}). Try again.")
    except SignInRefused as exc:
        logger.info("single sign-on refused a person: %s", exc)
        return _refused(request, str(exc))
    following = request.session.get(SESSION_NEXT_KEY) or reverse("home")
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    request.session.set_expiry(settings.PLINTH_OIDC_SESSION_HOURS * 3600)
    request.session[SESSION_ID_TOKEN_KEY] = token["id_token"]
    return redirect(following)


def _claims_options() -> dict[str, Any]:
    """What the ID token must say besides its nonce and times (Authlib checks those): issued
    by the configured issuer, to this console's client."""
    return {
        "iss": {"essential": True, "value": settings.PLINTH_OIDC_ISSUER},
        "aud": {"essential": True, "value": settings.PLINTH_OIDC_CLIENT_ID},
    }


def _check_issuer(client: DjangoOAuth2App) -> None:
    named = client.load_server_metadata().get("issuer")
    if named != settings.PLINTH_OIDC_ISSUER:
        # OpenID Connect Discovery 4.3: a document naming another issuer is not this one's.
        raise ProviderAnswerRefused(
            f"the provider's discovery document names the issuer {named!r}, "
            f"not {settings.PLINTH_OIDC_ISSUER!r} (PLINTH_OIDC_ISSUER)"
        )


def _person(client: DjangoOAuth2App, token: dict[str, Any]) -> VerifiedPerson:
    claims = token.get("userinfo")
    if not claims:
        raise ProviderAnswerRefused("the provider sent no ID token")
    claims = {**_userinfo(client, token, claims["sub"]), **claims}
    username_claim = settings.PLINTH_OIDC_USERNAME_CLAIM
    username = str(claims.get(username_claim) or "").strip()[:150]
    if not username:
        raise SignInRefused(
            f"{settings.PLINTH_OIDC_PROVIDER_NAME} sent no {username_claim!r} claim to name "
            "your account by (PLINTH_OIDC_USERNAME_CLAIM). Ask an administrator."
        )
    groups = claims.get(settings.PLINTH_OIDC_GROUPS_CLAIM) or []
    return VerifiedPerson(
        issuer=settings.PLINTH_OIDC_ISSUER,
        subject=str(claims["sub"]),
        username=username,
        email=str(claims.get("email") or "")[:254],
        groups=[str(g) for g in ([groups] if isinstance(groups, str) else groups)],
    )


def _userinfo(client: DjangoOAuth2App, token: dict[str, Any], subject: str) -> dict[str, Any]:
    """The provider's userinfo, where it has one: many put the profile and groups there, not
    in the ID token. Its ``sub`` must be the ID token's (OpenID Connect Core 5.3.2)."""
    if not client.load_server_metadata().get("userinfo_endpoint"):
        return {}
    info = dict(client.userinfo(token=token))
    if info.get("sub") != subject:
        raise ProviderAnswerRefused("userinfo names another subject than the ID token")
    return info


def _reason(exc: Exception) -> str:
    if isinstance(exc, AuthlibBaseError):
        return f"{exc.error}: {exc.description}" if exc.description else str(exc.error)
    return str(exc) or type(exc).__name__


@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    """End the console's session; for a session begun at the provider, go on to end the
    provider's too where it offers that, and come back to the sign-in page."""
    id_token = request.session.get(SESSION_ID_TOKEN_KEY)
    logout(request)
    back = request.build_absolute_uri(reverse("login"))
    if not (settings.SSO_ENABLED and id_token):
        return redirect("login")
    client = oidc_client()
    try:
        if not client.load_server_metadata().get("end_session_endpoint"):
            return redirect("login")
        # Not Authlib's logout_redirect: it keeps a state in the session just ended, which
        # nothing here checks (the way back is the sign-in page).
        end = client.create_logout_url(
            post_logout_redirect_uri=back,
            id_token_hint=id_token,
            client_id=settings.PLINTH_OIDC_CLIENT_ID,
        )
        return HttpResponseRedirect(end["url"])
    except requests.RequestException:
        return redirect("login")  # signed out here; the provider's session is its own


def _refused(request: HttpRequest, message: str, status: int = 403) -> HttpResponse:
    context = {"message": message, "provider": settings.PLINTH_OIDC_PROVIDER_NAME}
    return render(request, "registration/sso_refused.html", context, status=status)


def _provider_unreachable(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.warning("single sign-on: the identity provider did not answer: %s", type(exc).__name__)
    message = f"{settings.PLINTH_OIDC_PROVIDER_NAME} did not answer. Try again in a minute."
    return _refused(request, message, status=502)
