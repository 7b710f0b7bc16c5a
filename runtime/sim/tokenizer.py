"""A deterministic toy tokenizer, so usage numbers are exact and prefixes share tokens.

Text is cut into pieces of leading whitespace plus up to ``PIECE_CHARS`` visible characters. A piece
that is one of the generator's output words maps to that word's id; any other piece maps to a stable
hash. Equal text prefixes therefore give equal token prefixes (what the radix cache and the router's
prefix tree need), and text the simulator generated round-trips to the same ids when it is sent back
in a later turn.
"""

from __future__ import annotations

import re
import zlib

PIECE_CHARS = 6
# Ids below this are reserved: 0-9 specials, then the output words.
WORD_ID_BASE = 10
BOS_ID = 1
EOS_ID = 2  # also the chat template's end of turn, as Llama 3's <|eot_id|> ends a generation
# One special token per chat role header (as <|start_header_id|>role<|end_header_id|> would be).
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")
ROLE_HEADER_IDS = {role: 3 + i for i, role in enumerate(CHAT_ROLES)}

_PIECE = re.compile(rf"\s*\S{{1,{PIECE_CHARS}}}|\s+")

_WORDS = (
    "the of and to in is was for on that with as by at from it an be this are which or "
    "his has had but not they have were one their its all been also more new first other "
    "after time can into two when some there would who may only most over such where year "
    "made years many these than them then both before through about during state between "
    "under while world well since city part people three later known each could because "
    "being used until high same house school around however include several family during "
    "against name found among group four life second north south east west water light "
    "model token cache prefix engine batch decode stream route kernel tensor layer memory "
    "signal value system process result market river music field power place point order "
    "number form line level game team play work home story night early long small large "
    "great little old own right left good best next last few short final major common"
)
# Words are kept short enough to be one piece each, and unique, so that ids round-trip.
OUTPUT_WORDS: tuple[str, ...] = tuple(
    dict.fromkeys(" " + w for w in _WORDS.split() if len(w) <= PIECE_CHARS)
)
_WORD_IDS = {w: WORD_ID_BASE + i for i, w in enumerate(OUTPUT_WORDS)}
_HASH_BASE = WORD_ID_BASE + len(OUTPUT_WORDS)
_HEADER_PIECES = {i: f"<|{role}|>" for role, i in ROLE_HEADER_IDS.items()}


class Tokenizer:
    """Maps text to ids and generated ids back to text, for a vocabulary of ``vocab_size``."""

    def __init__(self, vocab_size: int = 128256) -> None:
        if vocab_size <= _HASH_BASE:
            raise ValueError(f"vocab_size must exceed {_HASH_BASE}")
        self.vocab_size = vocab_size
        self._hash_span = vocab_size - _HASH_BASE

    def encode(self, text: str) -> list[int]:
        return [self._piece_id(p) for p in _PIECE.findall(text)]

    def encode_chat(self, messages: list[tuple[str, str]]) -> list[int]:
        """A chat prompt, as a real chat template tokenizes it.

        Role headers and the end-of-turn separator are special tokens and each content is
        tokenized on its own, so nothing merges across a boundary: the prompt of turn n+1 starts
        with exactly turn n's prompt plus the answer's tokens (which end in EOS, the end of turn)
        and the radix cache matches both.
        """
        ids = [BOS_ID]
        for role, content in messages:
            ids.append(ROLE_HEADER_IDS[role])
            ids.extend(self.encode(content))
            ids.append(EOS_ID)
        ids.append(ROLE_HEADER_IDS["assistant"])
        return ids

    def count(self, text: str) -> int:
        return len(_PIECE.findall(text))

    def decode(self, ids: list[int]) -> str:
        return "".join(self.id_to_piece(i) for i in ids)

    def id_to_piece(self, token_id: int) -> str:
        word = token_id - WORD_ID_BASE
        if 0 <= word < len(OUTPUT_WORDS):
            return OUTPUT_WORDS[word]
        if token_id == EOS_ID:
            return ""
        if token_id in _HEADER_PIECES:
            return _HEADER_PIECES[token_id]
        # Prompt pieces hash one way; show an opaque but stable placeholder for them.
        return f" <{token_id}>"

    def _piece_id(self, piece: str) -> int:
        known = _WORD_IDS.get(piece)
        if known is not None:
            return known
        return _HASH_BASE + zlib.crc32(piece.encode("utf-8")) % self._hash_span


def output_word_id(index: int) -> int:
    """The token id of the ``index``-th output word (wrapping)."""
    return WORD_ID_BASE + index % len(OUTPUT_WORDS)


def output_word_count() -> int:
    return len(OUTPUT_WORDS)
