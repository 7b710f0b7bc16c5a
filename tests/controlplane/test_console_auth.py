"""Console sign-in (throttled per username and address) and organization switching."""

from __future__ import annotations

import re
from typing import Any

from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client
from django.utils import timezone

from tests.conftest import PASSWORD, Cast


def test_the_sign_in_page_renders_with_csrf(cast: Cast) -> None:
    response = Client(enforce_csrf_checks=True).get("/login/")
    assert response.status_code == 200
    assert b"csrfmiddlewaretoken" in response.content
    # A template comment Django did not take for one (``{# #}`` spans one line only) shows as text.
    assert b"{#" not in response.content and b"{% comment" not in response.content


def test_signing_in_and_out(cast: Cast) -> None:
    client = Client()
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    home = client.get("/", follow=True)
    assert home.status_code == 200
    assert b"Acme" in home.content
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_a_wrong_password_is_refused_without_detail(cast: Cast) -> None:
    response = Client().post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content


def test_a_malformed_organization_id_is_ignored(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.alice)
    assert client.post("/org/switch/", {"organization": "not-a-uuid"}).status_code == 302


def test_switching_to_an_org_one_does_not_belong_to_is_ignored(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.alice)
    client.post("/org/switch/", {"organization": str(cast.globex.pk)})
    home = client.get("/", follow=True)
    assert b"Globex" not in home.content.split(b"<main")[1]


def _sign_in(password: str, username: str = "alice", address: str = "203.0.113.7") -> Any:
    return Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})


def test_wrong_passwords_lock_the_username_from_that_address(cast: Cast) -> None:
    for _attempt in range(settings.AXES_FAILURE_LIMIT - 1):
        assert _sign_in("wrong").status_code == 200
    assert _sign_in("wrong").status_code == 429  # the last failure allowed locks the pair
    locked = _sign_in(PASSWORD)  # the right password no longer helps
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()
    assert b"Too many failed sign-ins" in locked.content and b"paused" in locked.content
    assert "_auth_user_id" not in locked.wsgi_request.session
    # The lock is on the pair: nobody elsewhere can lock alice out, nor alice lock out carol.
    assert _sign_in(PASSWORD, address="198.51.100.9").status_code == 302
    assert _sign_in(PASSWORD, username="carol").status_code == 302


def test_an_unknown_username_is_locked_out_the_same_way(cast: Cast) -> None:
    def statuses(username: str) -> list[int]:
        tries = settings.AXES_FAILURE_LIMIT + 1
        return [_sign_in("wrong", username=username).status_code for _ in range(tries)]

    # Word for word the same answers: the lock-out tells nothing about who exists.
    assert statuses("nobody") == statuses("alice")
    assert _without_tokens(_sign_in("x", username="nobody")) == _without_tokens(_sign_in("x"))


def _without_tokens(response: Any) -> bytes:
    """The page with its per-render CSRF tokens blanked out."""
    return re.sub(rb"[A-Za-z0-9]{64}", b"TOKEN", response.content)  # type: ignore[no-any-return]


def test_the_lock_lifts_after_the_cool_off(cast: Cast) -> None:
    for _attempt in range(settings.AXES_FAILURE_LIMIT):
        _sign_in("wrong")
    assert _sign_in(PASSWORD).status_code == 429
    # Time is the seam: age the recorded failures past the cool-off instead of waiting.
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME * 2)
    assert _sign_in(PASSWORD).status_code == 302


def test_a_successful_sign_in_resets_the_count(cast: Cast) -> None:
    for _attempt in range(settings.AXES_FAILURE_LIMIT - 1):
        _sign_in("wrong")
    assert _sign_in(PASSWORD).status_code == 302
    assert _sign_in("wrong").status_code == 200  # counting starts again
    assert _sign_in(PASSWORD).status_code == 302
