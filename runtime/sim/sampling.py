"""Deterministic "model output": which tokens a request generates, when it stops, and logprobs.

The model is one function: the next-token distribution after a context (``context_distribution``
of a rolling hash of the token ids), used both to generate and to score a prompt teacher-forced, as
a real model's forward pass is. So a greedy (temperature 0) token is the top-1 of the distribution
returned with it, and a generated token's logprob equals the input logprob of the same prefix sent
back as a prompt (the identity issue 17's KL gate relies on when it scores baseline outputs).
Sampled tokens and the answer's natural length derive from a 64-bit key hashed from the sampling
seed and the prompt's ids, so the same seed and prompt give the same text on every engine. A
quantized configuration perturbs the logits by a small, configuration-specific amount, which is
what a KL-divergence comparison of two revisions measures: one scalar per format, or, for a
checkpoint that says which layers it quantized, signed per-layer terms (``runtime.sim.drift``).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass

from runtime.sim.drift import Drift
from runtime.sim.tokenizer import EOS_ID, output_word_count, output_word_id

Noise = float | Drift  # a configuration's drift: one scalar per format, or per layer with signs

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
    """The token stream of one request, drawn from the model's distribution after its context.

    Every output position's distribution is ``context_distribution`` of the prompt and the tokens
    generated before it, the same function teacher-forced scoring uses, so a generated token's
    logprob equals the input logprob SGLang would report for the same prefix fed back as a prompt.
    Greedy decoding (temperature 0) takes the top candidate of that distribution (the seed plays no
    part, as on a real engine); otherwise the token is drawn from the candidates at the request's
    temperature, by a generator seeded from ``key`` (sampling seed and prompt), so a seed always
    gives the same text on every engine. A quantized engine's noise moves the logits, so its
    greedy choice can differ where the top two candidates are close.
    """

    def __init__(
        self,
        key: int,
        output_len_mean: int,
        noise: Noise,
        prompt_ids: list[int] | None = None,
        temperature: float = 1.0,
        adapter: str | None = None,
    ) -> None:
        self.key = key
        # A LoRA adapter is another model: its distributions start from its own context seed.
        self.salt = adapter_salt(adapter)
        self.noise = noise
        self.temperature = temperature
        self._rng = random.Random(key)
        # Answers have a natural length (where the model would emit EOS), drawn once per request.
        self.natural_len = 1 + int(self._rng.expovariate(1.0 / max(1, output_len_mean)))
        self._spec_rng = random.Random(key ^ 0x5EC)
        # _contexts[i] identifies prompt + tokens[:i]; the prompt's hash is taken when it is first
        # needed (after prefill), so a request refused or aborted before then costs nothing.
        self._prompt_ids = list(prompt_ids or ())
        self._contexts: list[int] = []
        self._tokens: list[int] = []

    def _context(self, position: int) -> int:
        if not self._contexts:
            self._contexts.append(context_hash(self._prompt_ids, self.salt))
        return self._contexts[position]

    def distribution(self, position: int) -> tuple[list[TokenLogprob], float]:
        """The candidates (most likely first) and log tail mass at an output position so far."""
        return context_distribution(self._context(position), self.noise)

    def token_at(self, position: int, finishing: bool) -> int:
        """The token at output ``position``; positions are asked for in order (a recomputed one
        after a retraction gets the same token again)."""
        if position < len(self._tokens):
            return self._tokens[position]
        if position != len(self._tokens):
            raise ValueError(f"output position {position} asked before {len(self._tokens)}")
        if finishing:
            token = EOS_ID
        else:
            candidates, _ = self.distribution(position)
            token = self._choose(position, candidates)
        self._tokens.append(token)
        self._contexts.append(_mix(self._context(position), token))
        return token

    def _choose(self, position: int, candidates: list[TokenLogprob]) -> int:
        if self.temperature <= 0:
            return candidates[0].token_id
        # Top-k sampling over the candidates (the tail is never drawn), at the temperature. In token
        # id order, not rank order: a quantized engine's small logit drift then moves the draw's
        # boundaries a little instead of reordering them, so the same seed mostly keeps its text.
        rng = random.Random(self.key + position * 7919)
        ordered = sorted(candidates, key=lambda c: c.token_id)
        best = candidates[0].logprob
        weights = [math.exp((c.logprob - best) / self.temperature) for c in ordered]
        (chosen,) = rng.choices(ordered, weights)
        return chosen.token_id

    def accept_length(self, num_steps: int, accept_rate: float) -> int:
        """Tokens one speculative verify step yields: accepted drafts plus the bonus token."""
        accepted = 1
        for _ in range(num_steps):
            if self._spec_rng.random() >= accept_rate:
                break
            accepted += 1
        return accepted

    def top_logprobs(
        self, position: int, token_id: int, count: int
    ) -> tuple[float, list[TokenLogprob]]:
        """The logprob of ``token_id`` at ``position``, and the top ``count`` candidates there."""
        candidates, tail = self.distribution(position)
        return token_logprob(candidates, tail, token_id), candidates[: max(1, count)]


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


def adapter_salt(adapter: str | None) -> int:
    """What a LoRA adapter changes in the model's output: a 64-bit salt of its name mixed into
    every context (0 for the base model, whose contexts stay as they were)."""
    if adapter is None:
        return 0
    return int.from_bytes(hashlib.blake2b(adapter.encode(), digest_size=8).digest(), "little")


def context_hash(input_ids: list[int], salt: int = 0) -> int:
    """The hash of the whole context ``input_ids`` (the last of ``context_hashes``)."""
    state = _CONTEXT_SEED ^ salt
    for token in input_ids:
        state = _mix(state, token)
    return state


def context_hashes(input_ids: list[int], salt: int = 0) -> list[int]:
    """``hashes[i]`` identifies the prefix ``input_ids[:i]`` (so there are ``len + 1`` of them)."""
    hashes = [_CONTEXT_SEED ^ salt]
    for token in input_ids:
        hashes.append(_mix(hashes[-1], token))
    return hashes


def context_distribution(context: int, noise: Noise) -> tuple[list[TokenLogprob], float]:
    """The top candidates after a context (most likely first) and the log of the tail mass."""
    drift = noise if isinstance(noise, Drift) else Drift(shared=noise)
    rng = random.Random(context)
    logits = [0.0]
    for _ in range(TOP_CANDIDATES - 1):
        logits.append(logits[-1] - rng.uniform(0.2, 2.0))
    rest = logits[-1] - 1.0
    ids = _alternatives(rng, output_word_id(rng.randrange(output_word_count())))
    if drift.shared:
        # Unit draws from the context only, scaled by the noise: FP8 and FP4 move the same
        # logits in the same direction, FP4 further. A per-layer drift's shared part is signed:
        # blocks pushing opposite ways cancel along this one direction.
        shared = random.Random(context ^ 0xD81F7)
        logits = [x + drift.shared * shared.gauss(0.0, 1.0) for x in logits]
        rest += drift.shared * shared.gauss(0.0, 1.0)
    if drift.private:
        # The blocks' own errors: a direction of their own, which only ever adds.
        own = random.Random(context ^ 0x9A7E)
        logits = [x + drift.private * own.gauss(0.0, 1.0) for x in logits]
        rest += drift.private * own.gauss(0.0, 1.0)
    norm = math.log(sum(math.exp(x) for x in [*logits, rest]))
    ranked = sorted(zip(ids, logits, strict=True), key=lambda pair: -pair[1])
    return [TokenLogprob(i, lg - norm) for i, lg in ranked], rest - norm


def teacher_forced_logprobs(
    input_ids: list[int], start: int, noise: Noise, top: int, salt: int = 0
) -> list[tuple[float, list[TokenLogprob]] | None]:
    """Per input position from ``start``: (logprob of that token, top ``top``), None for the first.

    Mirrors SGLang: the entry at ``start`` has no logprob (SGLang always pads it with None) and
    entry ``i`` is the distribution after ``input_ids[:i]``.
    """
    hashes = context_hashes(input_ids[:-1], salt)
    rows: list[tuple[float, list[TokenLogprob]] | None] = [None]
    for position in range(start + 1, len(input_ids)):
        candidates, tail = context_distribution(hashes[position], noise)
        rows.append((token_logprob(candidates, tail, input_ids[position]), candidates[:top]))
    return rows


def token_logprob(candidates: list[TokenLogprob], tail: float, token_id: int) -> float:
    """A token's logprob: its candidate's, or an even share of the tail mass."""
    own = next((c.logprob for c in candidates if c.token_id == token_id), None)
    return tail - math.log(TAIL_TOKENS) if own is None else own
