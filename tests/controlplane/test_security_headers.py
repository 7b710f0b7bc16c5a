"""Browser-facing hardening: a Content-Security-Policy the console satisfies (no inline script,
style or handler anywhere in the templates), and Secure cookies and HSTS in production."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from tests.conftest import Cast

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((ROOT / "templates").rglob("*.html"))

# What a strict CSP refuses to run or apply when it is written into the markup.
INLINE = {
    "event handler attribute": re.compile(r"<[^>]*\son[a-z]+\s*=", re.IGNORECASE),
    "style attribute": re.compile(r"<[^>]*\sstyle\s*=", re.IGNORECASE),
    "<style> element": re.compile(r"<style[\s>]", re.IGNORECASE),
    "inline <script>": re.compile(
        r"<script(?![^>]*\ssrc=)(?![^>]*type=\"application/json\")[^>]*>"
    ),
    "javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
    "htmx hx-on handler": re.compile(r"\shx-on", re.IGNORECASE),
}


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_template_holds_what_the_csp_would_block(template: Path) -> None:
    text = template.read_text()
    found = [name for name, pattern in INLINE.items() if pattern.search(text)]
    assert not found, f"{template.name} has {found}: move it to static/js/console.js or CSS"


def _policy(response: object) -> dict[str, list[str]]:
    header = response["Content-Security-Policy"]  # type: ignore[index]
    directives = (part.strip().split() for part in header.split(";") if part.strip())
    return {d[0]: d[1:] for d in directives}


@pytest.mark.parametrize("path", ["/login/", "/endpoints/", "/members/", "/api/v1/docs"])
def test_pages_carry_a_strict_policy(cast: Cast, path: str) -> None:
    client = Client()
    client.force_login(cast.alice)
    response = client.get(path)
    assert response.status_code == 200
    policy = _policy(response)
    for directive in ("default-src", "script-src", "style-src"):
        assert policy[directive] == ["'self'"], (directive, policy)
    assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]
    assert "'unsafe-eval'" not in response["Content-Security-Policy"]


def test_errors_carry_the_policy_too(cast: Cast) -> None:
    response = Client().get("/no-such-page/")
    assert (
        response.status_code == 404 and "script-src 'self'" in response["Content-Security-Policy"]
    )


def _settings_of(**env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    clean.update(env, DJANGO_SETTINGS_MODULE="controlplane.settings")
    names = [
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_HSTS_SECONDS",
        "SECURE_PROXY_SSL_HEADER",
    ]
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        f"print(json.dumps({{n: getattr(s, n, None) for n in {names!r}}}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=clean, cwd=ROOT, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


PRODUCTION = {
    "PLINTH_ENV": "production",
    "SECRET_KEY": "s" * 50,
    "PLINTH_ENCRYPTION_KEY": "ZGV2LWluc2VjdXJlLWVuY3J5cHRpb24ta2V5LTMyYiE=",
    "DATABASE_URL": "postgres://u@db/plinth",
    "REDIS_URL": "redis://r:6379/0",
    "ALLOWED_HOSTS": "plinth.example.com",
}


def test_production_sends_secure_cookies_and_hsts() -> None:
    prod = _settings_of(**PRODUCTION)
    assert prod["SESSION_COOKIE_SECURE"] is True and prod["CSRF_COOKIE_SECURE"] is True
    assert prod["SECURE_HSTS_SECONDS"] == 31_536_000
    assert prod["SECURE_PROXY_SSL_HEADER"] is None  # a forwarded header is trusted only on request
    behind_proxy = _settings_of(**PRODUCTION, PLINTH_TRUST_X_FORWARDED_PROTO="true")
    assert behind_proxy["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    dev = _settings_of(PLINTH_ENV="development")
    assert dev["SESSION_COOKIE_SECURE"] is False and dev["SECURE_HSTS_SECONDS"] == 0


def test_hsts_reaches_a_secure_request_in_production_settings(cast: Cast, settings: object) -> None:
    settings.SECURE_HSTS_SECONDS = 31_536_000  # type: ignore[attr-defined]
    response = Client().get("/login/", secure=True)
    assert response["Strict-Transport-Security"].startswith("max-age=31536000")
