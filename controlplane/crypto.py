"""Encryption of secret values at rest (Fernet, keyed by settings.PLINTH_ENCRYPTION_KEY)."""

from __future__ import annotations

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
