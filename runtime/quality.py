"""KL-divergence quality gate: how far a candidate revision's next-token distributions drift.

Pure math, no I/O. The runner (``runtime.quality_run``) scores the baseline's own output tokens
under both revisions with teacher forcing, so at every position both engines describe the next
token after the *same* prefix; each side gives its top-k as ``{token_id: logprob}``.

Per token we compute KL(baseline || candidate) over the baseline's top-k support plus one bucket
for everything else (the tail mass). Lumping tokens into buckets can only lower a KL divergence,
so the figure is a lower bound of the full-vocabulary KL when the candidate's probabilities are
known; a baseline token missing from the candidate's top-k gets an estimate that cannot exceed
the candidate's smallest listed probability nor its share of the candidate's tail.

Default gate (``GateThresholds``): mean per-token KL at most 0.05 nats and top-1 agreement at
least 0.95. FP8 weights or an FP8 KV cache usually sit far inside both; a 4-bit quantization is
where the gate starts to bite. They are conservative defaults; a revision's gate can set its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_MAX_MEAN_KL = 0.05  # nats per token
DEFAULT_MIN_TOP1_AGREEMENT = 0.95
WORST_PROMPTS = 5  # prompts listed, with their text, in a report
_FLOOR = 1e-12  # probability floor so a vanished bucket costs a large but finite KL

TopLogprobs = Mapping[int, float]  # the top-k of one position: token id -> logprob


def _probabilities(dist: TopLogprobs) -> dict[int, float]:
    """Listed probabilities, scaled down if rounding made them sum past 1."""
    probs = {token: math.exp(min(0.0, lp)) for token, lp in dist.items()}
    total = sum(probs.values())
    if total > 1.0:
        probs = {token: p / total for token, p in probs.items()}
    return probs


def token_kl(baseline: TopLogprobs, candidate: TopLogprobs) -> float:
    """KL(baseline || candidate) in nats over the baseline's top-k plus the tail bucket."""
    if not baseline:
        raise ValueError("the baseline distribution lists no tokens")
    p = _probabilities(baseline)
    q_known = _probabilities(candidate)
    q_tail = max(0.0, 1.0 - sum(q_known.values()))
    missing = [token for token in p if token not in q_known]
    if missing:
        # Unlisted by the candidate: below its smallest listed probability, and the missing
        # tokens plus the rest of the vocabulary share its tail.
        smallest = min(q_known.values(), default=1.0)
        guess = min(smallest, q_tail / (len(missing) + 1))
    q = {token: q_known.get(token, guess if missing else 0.0) for token in p}
    p_rest = max(0.0, 1.0 - sum(p.values()))
    q_rest = max(0.0, 1.0 - sum(q.values()))
    kl = sum(pi * math.log(pi / max(q[token], _FLOOR)) for token, pi in p.items() if pi > 0)
    if p_rest > 0:
        kl += p_rest * math.log(p_rest / max(q_rest, _FLOOR))
    return max(0.0, kl)  # Gibbs' inequality; rounding may leave a hair below zero


def top1(dist: TopLogprobs) -> int:
    """The most likely token (the smallest id on a tie, so both sides break ties alike)."""
    if not dist:
        raise ValueError("the distribution lists no tokens")
    return min(dist, key=lambda token: (-dist[token], token))


def top1_agreement(baseline: Sequence[TopLogprobs], candidate: Sequence[TopLogprobs]) -> float:
    """Share of positions where both sides rank the same token first (1.0 for no positions)."""
    _same_length(baseline, candidate)
    if not baseline:
        return 1.0
    agree = sum(top1(b) == top1(c) for b, c in zip(baseline, candidate, strict=True))
    return agree / len(baseline)


def percentile(values: Sequence[float], share: float) -> float:
    """Nearest-rank percentile (``share`` in (0, 1]); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _same_length(a: Sequence[Any], b: Sequence[Any]) -> None:
    if len(a) != len(b):
        raise ValueError(f"the two sides score different token counts ({len(a)} != {len(b)})")


@dataclass(frozen=True)
class PromptScore:
    """One prompt's tokens scored under both revisions."""

    index: int
    prompt: str
    kls: tuple[float, ...]
    agreements: int  # positions whose top-1 token is the same on both sides

    @property
    def tokens(self) -> int:
        return len(self.kls)

    @property
    def mean_kl(self) -> float:
        return sum(self.kls) / len(self.kls) if self.kls else 0.0

    @property
    def p99_kl(self) -> float:
        return percentile(self.kls, 0.99)

    @property
    def max_kl(self) -> float:
        return max(self.kls, default=0.0)

    @property
    def top1_agreement(self) -> float:
        return self.agreements / len(self.kls) if self.kls else 1.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "prompt": self.prompt,
            "tokens": self.tokens,
            "mean_kl": self.mean_kl,
            "p99_kl": self.p99_kl,
            "max_kl": self.max_kl,
            "top1_agreement": self.top1_agreement,
        }


def score_prompt(
    index: int,
    prompt: str,
    baseline: Sequence[TopLogprobs],
    candidate: Sequence[TopLogprobs],
) -> PromptScore:
    """Score one prompt: ``baseline[i]`` and ``candidate[i]`` describe the same position."""
    _same_length(baseline, candidate)
    kls = tuple(token_kl(b, c) for b, c in zip(baseline, candidate, strict=True))
    agreements = sum(top1(b) == top1(c) for b, c in zip(baseline, candidate, strict=True))
    return PromptScore(index=index, prompt=prompt, kls=kls, agreements=agreements)


@dataclass(frozen=True)
class GateThresholds:
    """A revision's gate; the defaults are documented in the module docstring."""

    max_mean_kl: float = DEFAULT_MAX_MEAN_KL
    min_top1_agreement: float = DEFAULT_MIN_TOP1_AGREEMENT

    def __post_init__(self) -> None:
        if self.max_mean_kl < 0:
            raise ValueError("max_mean_kl must be at least 0")
        if not 0.0 <= self.min_top1_agreement <= 1.0:
            raise ValueError("min_top1_agreement must be between 0 and 1")


@dataclass(frozen=True)
class GateVerdict:
    passed: bool
    reasons: tuple[str, ...]  # one line per threshold missed; empty when passed


@dataclass(frozen=True)
class QualityReport:
    """All prompts together: token-weighted figures, per-prompt spread and the worst prompts."""

    prompts: tuple[PromptScore, ...]
    thresholds: GateThresholds = field(default_factory=GateThresholds)

    @property
    def tokens(self) -> int:
        return sum(p.tokens for p in self.prompts)

    @property
    def mean_kl(self) -> float:
        """Mean over all scored tokens (long answers weigh more, as they do for users)."""
        return sum(sum(p.kls) for p in self.prompts) / self.tokens if self.tokens else 0.0

    @property
    def p99_kl(self) -> float:
        return percentile([kl for p in self.prompts for kl in p.kls], 0.99)

    @property
    def top1_agreement(self) -> float:
        return sum(p.agreements for p in self.prompts) / self.tokens if self.tokens else 1.0

    @property
    def prompt_mean_kl_p99(self) -> float:
        """The 99th percentile of per-prompt mean KL: is the drift spread or concentrated."""
        return percentile([p.mean_kl for p in self.prompts], 0.99)

    def worst(self, count: int = WORST_PROMPTS) -> list[PromptScore]:
        return sorted(self.prompts, key=lambda p: (-p.mean_kl, p.index))[:count]

    def verdict(self) -> GateVerdict:
        reasons = []
        if not self.tokens:
            reasons.append("no tokens were scored")
        if self.mean_kl > self.thresholds.max_mean_kl:
            reasons.append(
                f"mean KL {self.mean_kl:.4f} nats exceeds {self.thresholds.max_mean_kl:g}"
            )
        if self.top1_agreement < self.thresholds.min_top1_agreement:
            reasons.append(
                f"top-1 agreement {self.top1_agreement:.4f} is below "
                f"{self.thresholds.min_top1_agreement:g}"
            )
        return GateVerdict(passed=not reasons, reasons=tuple(reasons))

    def as_dict(self) -> dict[str, Any]:
        verdict = self.verdict()
        return {
            "passed": verdict.passed,
            "reasons": list(verdict.reasons),
            "thresholds": {
                "max_mean_kl": self.thresholds.max_mean_kl,
                "min_top1_agreement": self.thresholds.min_top1_agreement,
            },
            "prompts": len(self.prompts),
            "tokens": self.tokens,
            "mean_kl": self.mean_kl,
            "p99_kl": self.p99_kl,
            "top1_agreement": self.top1_agreement,
            "prompt_mean_kl_p99": self.prompt_mean_kl_p99,
            "worst_prompts": [p.as_dict() for p in self.worst()],
        }
