"""Encryption of secret values at rest (Fernet, keyed by settings.PLINTH_ENCRYPTION_KEY), and
the per-endpoint engine key derived from the same setting."""

from __future__ import annotations

import hashlib
import hmac

from cryptography.fernet import Fernet, InvalidToken
from django.conf import settings


class SecretDecryptionError(Exception):
    """The stored value cannot be decrypted with the configured key (was the key rotated?)."""


def _fernet() -> Fernet:
    return Fernet(settings.PLINTH_ENCRYPTION_KEY.encode())


def encrypt(value: str) -> str:
    return _fernet().encrypt(value.encode("utf-8")).decode("ascii")


def decrypt(token: str) -> str:
    try:
        return _fernet().decrypt(token.encode("ascii")).decode("utf-8")
    except InvalidToken as exc:
        raise SecretDecryptionError(
            "secret cannot be decrypted with PLINTH_ENCRYPTION_KEY"
        ) from exc


def engine_api_key(deployment_id: str) -> str:
    """The bearer token an endpoint's engines and router demand (SGLang's and smg's ``--api-key``).

    Derived, not stored: reconcile (which renders it into the endpoint's Secret), the probe and
    the gateway each compute it from the endpoint id, so none of them reads a cluster or the
    database for it, and a leaked Secret names one endpoint's key, never another's or the root.
    Rotating ``PLINTH_ENCRYPTION_KEY`` rotates every engine key on the next reconcile pass.
    Hex, so it can never read as a flag in argv.
    """
    message = f"plinth.engine-api-key:{deployment_id}".encode()
    digest = hmac.new(settings.PLINTH_ENCRYPTION_KEY.encode(), message, hashlib.sha256)
    return f"pek_{digest.hexdigest()}"
