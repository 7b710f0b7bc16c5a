"""The routing key of an inference request: a hash naming the context its prompt can share.

Requests are placed by this key (``RoutingSettings.placement == "by_count"``, the default): the
gateway gives a key it has not seen to the replica with the least recent traffic and keeps it there
(``gateway.placement``), so tenants spread by load and each one's prefix cache stays on one
replica; the router falls back to the key's hash for a request that names no replica. smg 1.13's
own placement of an unseen prefix ignores how many prefixes a replica already holds, and a
replica given too many thrashes its cache (see ``runtime.spec``'s ``PLINTH_ROUTING``).

The shareable context of a chat is its leading system (or developer) messages plus the first
other message: a tenant's system prompt is repeated by every request of the tenant, and the
first user turn by every turn of a conversation. Only its first ``PREFIX_CHARS`` characters
count, so a long system prompt alone names a tenant (its conversations go together, sharing its
cache) while a short, common one ("You are a helpful assistant.") plus the first question names
a conversation (so one generic prompt does not pin all traffic to one engine). A completion's
key is its prompt's first ``PREFIX_CHARS`` characters (or ``PREFIX_TOKENS`` token ids).

Callers: the gateway, on every request it forwards to a router (``gateway.upstream``), and
``bench/routing.py`` when it plays Plinth's router. Pure: no I/O, no Django. The key is a
digest and never carries prompt text (it travels as a header and may be logged by the router).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The header the gateway sets and the deployed router reads (``--routing-key-headers``).
ROUTING_KEY_HEADER = "x-plinth-routing-key"
# smg's header naming the replica (an index into its workers) a request must go to; honoured by
# its consistent_hashing policy. The gateway sets it where it places keys (``gateway.placement``).
TARGET_WORKER_HEADER = "x-smg-target-worker"
# smg's cache-aware prefix length is 256 tokens, and it hashes four characters per token of
# untokenized text (`--prefix-token-count`): the same reach, about a paragraph.
PREFIX_CHARS = 1024
PREFIX_TOKENS = 256
_LEADING_ROLES = frozenset({"system", "developer"})


def routing_key(payload: object) -> str | None:
    """The routing key of a request body (parsed JSON), or None when it names no prompt.

    32 hex digits: the same shareable prefix always gives the same key, in every process.
    """
    if not isinstance(payload, dict):
        return None
    head = _chat_head(payload.get("messages"))
    if head is None:
        head = _prompt_head(payload)
    if head is None:
        return None
    return hashlib.blake2b(head.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def context_tokens(payload: object) -> int:
    """About how many tokens a request's prompt holds (four characters a token, as smg counts
    untokenized text): the working set its routing key keeps cached on its replica, for
    ``gateway.placement``. 0 when the body names no prompt."""
    if not isinstance(payload, dict):
        return 0
    messages = payload.get("messages")
    if isinstance(messages, list):
        chars = sum(len(_text(m.get("content") if isinstance(m, dict) else m)) for m in messages)
        return chars // 4
    for name in ("prompt", "text"):
        prompt = payload.get(name)
        if isinstance(prompt, str):
            return len(prompt) // 4
    ids = payload.get("input_ids")
    return len(ids) if isinstance(ids, list) and ids and isinstance(ids[0], int) else 0


def _chat_head(messages: object) -> str | None:
    """Leading system messages and the first other one, tagged by role, cut at PREFIX_CHARS."""
    if not isinstance(messages, list) or not messages:
        return None
    parts: list[str] = []
    for message in messages:
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else message
        parts.append(f"{role}\x00{_text(content)}\x00")
        if role not in _LEADING_ROLES or sum(map(len, parts)) >= PREFIX_CHARS:
            break
    return "chat\x00" + "".join(parts)[:PREFIX_CHARS]


def _prompt_head(payload: dict[str, Any]) -> str | None:
    """The head of a completion's prompt (OpenAI's ``prompt``, SGLang's ``text``/``input_ids``)."""
    for name in ("prompt", "text", "input_ids"):
        prompt = payload.get(name)
        if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
            prompt = prompt[0]  # a batch: keyed by its first prompt
        if isinstance(prompt, str) and prompt:
            return "text\x00" + prompt[:PREFIX_CHARS]
        if isinstance(prompt, list) and prompt:
            return "ids\x00" + json.dumps(prompt[:PREFIX_TOKENS])
    return None


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    # Content parts (text and images) or anything else: a canonical spelling of the value.
    return json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
