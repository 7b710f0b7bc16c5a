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
