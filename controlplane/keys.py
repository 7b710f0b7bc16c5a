"""API key material: generation, hashing and constant-time verification.

A key looks like ``plm_3fa9c2d1e0b7_<40 url-safe chars>`` (``plm`` management, ``pli``
inference). The part up to the second underscore is the public prefix, stored and shown in
lists; the whole key is hashed with SHA-256. Keys carry 240 bits of randomness, so a fast hash
is enough (as GitHub and Stripe do); a slow KDF would only cost latency on every request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

KIND_TAGS = {"management": "plm", "inference": "pli"}


@dataclass(frozen=True)
class NewKey:
    plaintext: str
    prefix: str
    key_hash: str


def hash_key(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode("utf-8")).hexdigest()


def generate_key(kind: str) -> NewKey:
    tag = KIND_TAGS[kind]
    prefix = f"{tag}_{secrets.token_hex(6)}"
    plaintext = f"{prefix}_{secrets.token_urlsafe(30)}"
    return NewKey(plaintext=plaintext, prefix=prefix, key_hash=hash_key(plaintext))


def split_prefix(plaintext: str) -> str | None:
    """The stored prefix of a presented key, or None when it is not shaped like one of ours."""
    parts = plaintext.split("_", 2)
    if len(parts) != 3 or parts[0] not in KIND_TAGS.values() or len(parts[1]) != 12:
        return None
    return f"{parts[0]}_{parts[1]}"


def hashes_match(plaintext: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(plaintext), stored_hash)
