"""Where the clients find the API: arguments, then the environment, then ``login``'s file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

URL_ENV = "PLINTH_URL"
KEY_ENV = "PLINTH_API_KEY"
CONFIG_ENV = "PLINTH_CONFIG"


@dataclass(frozen=True)
class Credentials:
    url: str
    key: str


def config_path() -> Path:
    """``$PLINTH_CONFIG``, else ``plinth/config.yaml`` in the user's config dir (XDG on Linux)."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "plinth" / "config.yaml"


def save(credentials: Credentials) -> Path:
    """Write the URL and key readable by the user alone (0600, created so: never world-readable
    even for a moment)."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = yaml.safe_dump({"url": credentials.url, "key": credentials.key})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, 0o600)  # an older file keeps its mode through O_TRUNC
    return path


def load(url: str | None = None, key: str | None = None) -> Credentials | None:
    """The credentials to use, or None when no URL or key is known anywhere."""
    stored: dict[str, str] = {}
    path = config_path()
    if path.exists():
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        stored = loaded if isinstance(loaded, dict) else {}
    url = url or os.environ.get(URL_ENV) or stored.get("url")
    key = key or os.environ.get(KEY_ENV) or stored.get("key")
    if not url or not key:
        return None
    return Credentials(url=url.rstrip("/"), key=key)
