"""A per-caller request budget for /api/v1, so one runaway script cannot starve the others.

Fixed one-minute windows counted in Redis (the Django cache), per management key or console
user within an organization. The budget is ``settings.PLINTH_API_RATE_LIMIT`` requests a minute
(default 1200), read on each request so operators and tests can change it. If Redis is down the
API stays up: the budget is simply not enforced until it is back.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from ninja.throttling import BaseThrottle

from controlplane.access import Actor

logger = logging.getLogger(__name__)

WINDOW_S = 60


def _caller(auth: Any) -> str | None:
    """The budget's owner: an actor (key or session, in an organization), or a signed-in user
    on the routes about a person (``deployments.api.auth.SignedInUser``)."""
    if isinstance(auth, Actor):
        return f"{auth.organization.pk}:{auth.label}"
    if auth is not None and getattr(auth, "is_authenticated", False):
        return f"person:{auth.pk}"
    return None


class CallerThrottle(BaseThrottle):
    def allow_request(self, request: HttpRequest) -> bool:
        caller = _caller(getattr(request, "auth", None))
        if caller is None:
            return True
        budget = settings.PLINTH_API_RATE_LIMIT
        window = int(time.time() // WINDOW_S)
        key = f"api-rate:{caller}:{window}"
        try:
            cache.add(key, 0, timeout=WINDOW_S * 2)
            return int(cache.incr(key)) <= budget
        except Exception:  # the cache is Redis; an outage must not take the API down
            logger.warning("rate limit not enforced: cache unavailable", exc_info=True)
            return True

    def wait(self) -> float:
        return WINDOW_S - time.time() % WINDOW_S
