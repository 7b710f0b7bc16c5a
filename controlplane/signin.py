"""The answer to a locked-out sign-in (django-axes calls ``locked_out``; settings.py configures
the limit and the pause). It says what happened and for how long, and nothing about whether
the username exists: a missing user is counted and locked out exactly like a real one."""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def lockout_minutes() -> int:
    return max(1, math.ceil(float(settings.AXES_COOLOFF_TIME.total_seconds()) / 60))


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None = None, credentials: Any = None
) -> HttpResponse:
    context = {"failure_limit": settings.AXES_FAILURE_LIMIT, "minutes": lockout_minutes()}
    response = render(request, "registration/locked_out.html", context, status=429)
    response["Retry-After"] = str(lockout_minutes() * 60)
    return response
