"""The console's sign-in page, and the answer to a locked-out sign-in.

The page offers single sign-on when it is configured (controlplane/sso.py) and the password
form while passwords are allowed (PLINTH_PASSWORD_SIGN_IN; off by default with single sign-on):
a password sent while they are off is refused with a page that says so, never checked.

django-axes calls ``locked_out``; settings.py configures the limit and the pause. It says what
happened and for how long, and nothing about whether the username exists: a missing user is
counted and locked out exactly like a real one."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode


class SignInView(LoginView):
    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_enabled"] = settings.SSO_ENABLED
        context["sso_provider"] = settings.PLINTH_OIDC_PROVIDER_NAME
        context["password_sign_in"] = settings.PLINTH_PASSWORD_SIGN_IN
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.PLINTH_PASSWORD_SIGN_IN:
            return password_sign_in_off(request)
        return super().post(request, *args, **kwargs)


def password_sign_in_off(request: HttpRequest) -> HttpResponse:
    context = {
        "sso_enabled": settings.SSO_ENABLED,
        "sso_provider": settings.PLINTH_OIDC_PROVIDER_NAME,
    }
    return render(request, "registration/password_off.html", context, status=403)


def admin_sign_in(request: HttpRequest) -> HttpResponse:
    """The admin site's own sign-in form checks passwords too: while they are off, it sends
    people to the console's sign-in page (and back to the admin once signed in)."""
    if settings.PLINTH_PASSWORD_SIGN_IN:
        return admin.site.login(request)
    if request.method == "POST":
        return password_sign_in_off(request)
    following = request.GET.get("next") or reverse("admin:index")
    return redirect(f"{reverse('login')}?{urlencode({'next': following})}")


def lockout_minutes() -> int:
    return max(1, math.ceil(float(settings.AXES_COOLOFF_TIME.total_seconds()) / 60))


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    context = {"failure_limit": settings.AXES_FAILURE_LIMIT, "minutes": lockout_minutes()}
    response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(lockout_minutes() * 60)
    return response
