"""Deterministic "model output": which tokens a request generates, when it stops, and logprobs.

Everything derives from a 64-bit key hashed from the sampling seed and the prompt's token ids,
so the same seed and prompt always give the same text and ids on every engine. A quantized
configuration keeps the same tokens but perturbs the top-logprob distributions by a small,
configuration-specific amount, which is what a KL-divergence comparison of two revisions needs.
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from runtime.sim.tokenizer import EOS_ID, output_word_count, output_word_id

TOP_CANDIDATES = 20  # alternatives kept per position; top_logprobs_num is capped here


def request_key(seed: int, prompt_ids: list[int]) -> int:
    digest = hashlib.blake2b(digest_size=8)
    digest.update(seed.to_bytes(8, "little", signed=True))
    digest.update(b"".join(i.to_bytes(4, "little") for i in prompt_ids))
    return int.from_bytes(digest.digest(), "little")


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    logprob: float


class TokenSource:
    """The token stream of one request."""

    def __init__(self, key: int, output_len_mean: int, noise: float) -> None:
        self.key = key
        self.noise = noise
        self._rng = random.Random(key)
        # Answers have a natural length (where the model would emit EOS), drawn once per request.
        self.natural_len = 1 + int(self._rng.expovariate(1.0 / max(1, output_len_mean)))
        self._spec_rng = random.Random(key ^ 0x5EC)

    def token_at(self, position: int, finishing: bool) -> int:
        if finishing:
            return EOS_ID
        return output_word_id(random.Random(self.key + position * 7919).randrange(1 << 30))

    def accept_length(self, num_steps: int, accept_rate: float) -> int:
        """Tokens one speculative verify step yields: accepted drafts plus the bonus token."""
        accepted = 1
        for _ in range(num_steps):
            if self._spec_rng.random() >= accept_rate:
                break
            accepted += 1
        return accepted

    def top_logprobs(self, position: int, token_id: int, count: int) -> list[TokenLogprob]:
        """The chosen token first, then ``count - 1`` alternatives, as normalised logprobs."""
        rng = random.Random((self.key << 20) ^ position)
        logits = [0.0]
        for _ in range(TOP_CANDIDATES - 1):
            logits.append(logits[-1] - rng.uniform(0.2, 2.0))
        rest = logits[-1] - 1.0
        if self.noise:
            drift = random.Random(rng.random() + self.noise)
            logits = [x + drift.gauss(0.0, self.noise) for x in logits]
        norm = math.log(sum(math.exp(x) for x in [*logits, rest]))
        ids = _alternatives(rng, token_id)
        return [TokenLogprob(i, lg - norm) for i, lg in zip(ids, logits, strict=True)][
            : max(1, count)
        ]


def _alternatives(rng: random.Random, chosen: int) -> list[int]:
    ids = [chosen]
    while len(ids) < TOP_CANDIDATES:
        candidate = output_word_id(rng.randrange(output_word_count()))
        if candidate not in ids:
            ids.append(candidate)
    return ids


# Teacher-forced scoring. SGLang's ``input_top_logprobs`` describe the model's next-token
# distribution after each prefix of the input, so the simulator derives them from a rolling hash of
# the token context alone (no sampling seed, no request key): the same ids score the same on every
# engine, and two unquantized engines agree exactly. A quantized engine shifts every logit by the
# same deterministic unit draws scaled by its noise, so the distance to the unquantized
# distribution grows monotonically with the configuration's noise.
_CONTEXT_SEED = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1
TAIL_TOKENS = 1000  # a token outside the top candidates shares the tail mass with this many others


def _mix(state: int, token: int) -> int:
    """One step of a splitmix64-style rolling hash over token ids."""
    z = (state ^ (token + 0x632BE59BD9B4E019)) * 0xBF58476D1CE4E5B9 & _MASK64
    z = (z ^ (z >> 31)) * 0x94D049BB133111EB & _MASK64
    return z ^ (z >> 29)


def context_hashes(input_ids: list[int]) -> list[int]:
    """``hashes[i]`` identifies the prefix ``input_ids[:i]`` (so there are ``len + 1`` of them)."""
    hashes = [_CONTEXT_SEED]
    for token in input_ids:
        hashes.append(_mix(hashes[-1], token))
    return hashes


def context_distribution(context: int, noise: float) -> tuple[list[TokenLogprob], float]:
    """The top candidates after a context (most likely first) and the log of the tail mass."""
    rng = random.Random(context)
    logits = [0.0]
    for _ in range(TOP_CANDIDATES - 1):
        logits.append(logits[-1] - rng.uniform(0.2, 2.0))
    rest = logits[-1] - 1.0
    ids = _alternatives(rng, output_word_id(rng.randrange(output_word_count())))
    if noise:
        # Unit draws from the context only, scaled by the noise: FP8 and FP4 move the same
        # logits in the same direction, FP4 further.
        drift = random.Random(context ^ 0xD81F7)
        logits = [x + noise * drift.gauss(0.0, 1.0) for x in logits]
        rest += noise * drift.gauss(0.0, 1.0)
    norm = math.log(sum(math.exp(x) for x in [*logits, rest]))
    ranked = sorted(zip(ids, logits, strict=True), key=lambda pair: -pair[1])
    return [TokenLogprob(i, lg - norm) for i, lg in ranked], rest - norm


def teacher_forced_logprobs(
    input_ids: list[int], start: int, noise: float, top: int
) -> list[tuple[float, list[TokenLogprob]] | None]:
    """Per input position from ``start``: (logprob of that token, top ``top``), None for the first.

    Mirrors SGLang: the entry at ``start`` has no logprob (SGLang always pads it with None) and
    entry ``i`` is the distribution after ``input_ids[:i]``.
    """
    hashes = context_hashes(input_ids[:-1])
    rows: list[tuple[float, list[TokenLogprob]] | None] = [None]
    for position in range(start + 1, len(input_ids)):
        candidates, tail = context_distribution(hashes[position], noise)
        token = input_ids[position]
        own = next((c.logprob for c in candidates if c.token_id == token), None)
        if own is None:
            own = tail - math.log(TAIL_TOKENS)
        rows.append((own, candidates[:top]))
    return rows
