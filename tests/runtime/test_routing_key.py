"""The routing key names a request's shareable prompt prefix, never its text."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from runtime.routing_key import PREFIX_CHARS, PREFIX_TOKENS, routing_key

_KEY = re.compile(r"\A[0-9a-f]{32}\Z")
texts = st.text(min_size=1, max_size=3000)


def _chat(system: str, *turns: str) -> dict[str, object]:
    messages = [{"role": "system", "content": system}]
    messages += [
        {"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(turns)
    ]
    return {"model": "m", "messages": messages}


@given(texts, texts, texts, texts)
def test_a_conversation_keeps_its_key_turn_after_turn(
    system: str, first: str, answer: str, second: str
) -> None:
    key = routing_key(_chat(system, first))
    assert key is not None and _KEY.match(key)
    assert routing_key(_chat(system, first, answer, second)) == key


@given(st.text(min_size=PREFIX_CHARS, max_size=PREFIX_CHARS + 500), texts, texts)
def test_a_long_system_prompt_alone_names_the_tenant(system: str, one: str, other: str) -> None:
    # Every request of a tenant shares its system prompt's cache: one key, one engine.
    assert routing_key(_chat(system, one)) == routing_key(_chat(system, other))


def test_a_short_common_system_prompt_does_not_pin_everyone_together() -> None:
    generic = "You are a helpful assistant."
    assert routing_key(_chat(generic, "Plan a trip")) != routing_key(_chat(generic, "Fix my code"))


@given(st.text(min_size=1, max_size=PREFIX_CHARS), texts)
def test_the_key_never_carries_prompt_text(system: str, question: str) -> None:
    key = routing_key(_chat(system, question))
    assert key is not None and _KEY.match(key)
    if len(system) >= 8:
        assert system not in key


@given(st.text(min_size=PREFIX_CHARS, max_size=PREFIX_CHARS + 200), texts, texts)
def test_completions_are_keyed_by_their_prompts_head(head: str, one: str, other: str) -> None:
    assert routing_key({"prompt": head + one}) == routing_key({"prompt": head + other})
    assert routing_key({"prompt": [head + one]}) == routing_key({"text": head + other})


def test_token_prompts_are_keyed_by_their_first_tokens() -> None:
    ids = list(range(PREFIX_TOKENS))
    assert routing_key({"input_ids": [*ids, 1]}) == routing_key({"prompt": [*ids, 2]})
    assert routing_key({"prompt": [1, 2]}) != routing_key({"prompt": [2, 1]})


def test_content_parts_and_odd_bodies() -> None:
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert routing_key(parts) == routing_key(dict(parts))
    for body in (None, [], "text", {}, {"messages": []}, {"prompt": ""}, {"input": "embed me"}):
        assert routing_key(body) is None


def test_context_tokens_estimate_the_whole_prompt_at_four_characters_a_token() -> None:
    """Issue 29: the working set a key keeps cached is its whole context, not only the head
    the key is made from."""
    from runtime.routing_key import context_tokens

    chat = {"messages": [{"role": "system", "content": "s" * 4000},
                         {"role": "user", "content": "u" * 400}]}  # fmt: skip
    assert context_tokens(chat) == 1100
    assert context_tokens({"prompt": "p" * 80}) == 20
    assert context_tokens({"input_ids": [1, 2, 3]}) == 3
    assert context_tokens({"model": "m"}) == 0 and context_tokens([1]) == 0
