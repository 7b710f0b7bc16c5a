"""Typed readers of environment variables for settings.py.

Each reader names the variable in its error, so a bad deployment fails at start-up with a
message an operator can act on. ``NAME_FILE`` (a path) is read instead of ``NAME`` when set,
which is how Kubernetes mounts secrets.
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str) -> str | None:
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            with open(file_path, encoding="utf-8") as handle:
                return handle.read().strip()
        except OSError as exc:
            raise ImproperlyConfigured(f"{name}_FILE: cannot read {file_path!r}: {exc}") from exc
    return os.environ.get(name)


def env_str(name: str, default: str, *, required: bool = False) -> str:
    value = _raw(name)
    if value is None or value == "":
        if required:
            raise ImproperlyConfigured(f"{name} is required (set {name} or {name}_FILE)")
        return default
    return value


def env_bool(name: str, *, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), got {value!r}")


def env_int(name: str, default: int) -> int:
    value = _raw(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from exc


def env_list(name: str, default: list[str], required: bool) -> list[str]:
    value = _raw(name)
    if value is None or value.strip() == "":
        if required:
            raise ImproperlyConfigured(f"{name} is required (comma-separated list)")
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_database(name: str, default: str, *, required: bool) -> dict[str, Any]:
    """Parse a ``postgres://`` URL; a Unix socket directory goes percent-encoded in the host."""
    import dj_database_url

    url = env_str(name, default, required=required)
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql", "pgsql", "postgis"}:
        raise ImproperlyConfigured(
            f"{name} must be a PostgreSQL URL like postgres://user:pass@host:5432/db, "
            f"got scheme {parsed.scheme or '(none)'!r}"
        )
    if not parsed.path.strip("/"):
        raise ImproperlyConfigured(f"{name} must name a database (postgres://host/DBNAME)")
    try:
        _ = parsed.port
        config: dict[str, Any] = dict(dj_database_url.parse(url))
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is malformed: {exc}") from exc
    return config


def env_redis_url(name: str, default: str, *, required: bool) -> str:
    url = env_str(name, default, required=required)
    parsed = urlparse(url)
    if parsed.scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(
            f"{name} must be a Redis URL like redis://host:6379/0, got {url.split('@')[-1]!r}"
        )
    try:
        _ = parsed.port
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} is malformed: {exc}") from exc
    return url


def env_fernet_key(name: str, default: str, *, required: bool) -> str:
    value = env_str(name, default, required=required)
    try:
        decoded = base64.urlsafe_b64decode(value.encode())
    except (binascii.Error, ValueError) as exc:
        raise ImproperlyConfigured(f"{name} must be a url-safe base64 Fernet key") from exc
    if len(decoded) != 32:
        raise ImproperlyConfigured(
            f"{name} must decode to 32 bytes (generate one with "
            "`python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key())'`)"
        )
    return value
