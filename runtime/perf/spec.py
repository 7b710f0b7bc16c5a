"""Speculative decoding physics: draft shapes, acceptance, and what drafting costs.

A verify step yields the bonus token plus every draft token accepted in a row. Acceptance is a
per-(target, draft, workload) curve of conditional acceptance per draft depth (flat for EAGLE-3,
decaying for a reused MTP/NextN module or an EAGLE-2 head, bursty for NGRAM), held in the
catalogue with its source. A tree of ``topk`` branches is built as SGLang builds it: a beam of
``topk`` nodes expanded ``num_steps`` times, then the ``num_draft_tokens - 1`` best nodes by the
draft's own scores are verified. Two things decide what a tree gains, and they pull apart:
- the target's token is often one of the draft's runner-ups when the top candidate misses
  (``sibling_catch``): a full tree of fixed depth accepts more than a chain of that depth
  (SDB: depth 3, 21 tokens, accept length 2.92 against the chain's 2.25);
- the draft's scores are its own softmax, less confident in its top candidate than greedy
  verification accepts it (``draft_confidence`` < 1) and generous to runner-ups
  (``sibling_score``), so SGLang's score-ranked pick spends a small budget on siblings before
  depth: at a fixed token budget a wider tree reaches less depth (SpecBundle: (7,4,8) accepts
  about what a (3,1,4) chain does).
A better draft must never accept less. Two things broke that: the draft's top score fell below
its runner-up's at a low acceptance, so a better draft re-ranked the tree towards deep nodes of
small true chance (the top score now has its runner-up's as a floor, ``_top_score``); and the
pick was a hard cut on mean scores, so the accept length jumped where two nodes swapped at the
cut (it is now the mean over requests whose scores stray by ``SCORE_NOISE``, a smooth top-k).
A draft is not equally sure at every level of every request: where it is unsure its top score
is low, so the pick spends budget on siblings, and that is where its top misses and a
runner-up is worth verifying; where it is sure, the pick goes deep and the top is right. The
mean curve alone loses that correlation and credits a 2-wide tree almost nothing over its
chain (SDB puts the 6-token tree 2-5% ahead at batch 1), so a tree's levels are each sure or
unsure, half the time each, around the curve (``SURE_SPREAD``); a chain verifies every level
whatever its state, so its accept length is still the curve's.
The fitted numbers live in
``runtime/catalog/speculative/fitted.yaml`` (``bench/speculative.py``).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from functools import lru_cache

from runtime.catalog.perf import AcceptanceCurve, PerfCatalog, perf_catalog
from runtime.perf.hardware import ModelShape

EAGLE_HEADS = frozenset({"EAGLE", "EAGLE3"})
# SGLang's speculative path; the fit also holds vLLM's costs for its own rows.
DEFAULT_ENGINE = "sglang"
# How far one request's draft scores stray from the curve's, in log score (a logistic's scale):
# SGLang's pick of the best-scored nodes is a hard cut in each request and a smooth one over
# requests (``_verify_chances``). Small, so the fitted trees keep what a hard cut gave them
# while the accept length no longer jumps at a cut.
SCORE_NOISE = 0.05
# How far a level's acceptance in one request strays from the curve's, as a share of the room
# on its nearer side (``_sure_and_unsure``): at the curve's 0.6 a sure level accepts 0.76 and an
# unsure one 0.44. Chosen, not fitted (of 0.3, 0.4, 0.5, 0.8): 0.4 puts SDB's 6-token trees
# level with their chains at batch 1 where 0.3 leaves an EAGLE-2 head's 4% behind, and keeps
# the SGLang docs launches within 15% where 0.5 does not.
SURE_SPREAD = 0.4
# Levels whose sure and unsure states are told apart (2^3 trees a request at most): deeper nodes
# carry little of the accept length, and each state doubles the work.
MIXED_LEVELS = 3


@dataclass(frozen=True)
class SpecShape:
    """SGLang's (num_steps, eagle_topk, num_draft_tokens) after its defaulting rules."""

    num_steps: int
    topk: int
    draft_tokens: int


@dataclass(frozen=True)
class Curve:
    """Conditional acceptance per depth (see ``AcceptanceCurve``)."""

    first: float
    rest: float
    decay: float = 1.0

    def at(self, depth: int) -> float:
        """P(depth `depth` accepted | depth - 1 accepted), depth counted from 1."""
        if depth <= 1:
            return self.first
        return min(0.995, self.rest * self.decay ** (depth - 2))

    def scaled_to(self, first: float) -> Curve:
        """The same form with its first position at `first` (the simulator's accept-rate flag)."""
        ratio = first / self.first
        return Curve(first, min(0.995, self.rest * ratio), self.decay)

    @classmethod
    def of(cls, row: AcceptanceCurve) -> Curve:
        return cls(row.first, row.rest, row.decay)


@dataclass(frozen=True)
class SpecConfig:
    """Everything the step-time model needs to know about one speculative configuration."""

    algorithm: str  # canonical name: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM
    shape: SpecShape
    curve: Curve
    sibling_catch: float
    sibling_score: float
    draft_overhead_s: float  # per draft pass (NGRAM: per step), beyond the draft's weights
    verify_overhead_s: float  # per verified draft token
    step_overhead_s: float  # per speculative step (tree build, draft extend, bookkeeping)
    draft: ModelShape | None  # the draft network (None for NGRAM; NEXTN uses a target layer)
    draft_confidence: float = 1.0  # the draft's score of its top candidate over its acceptance
    tree_verify_s: float = 0.0  # per tree token, layer and GPU query head (topk > 1)

    @property
    def acceptance(self) -> float:
        """The chance the first draft position is accepted."""
        return self.curve.first

    @property
    def accept_length(self) -> float:
        return expected_accept_length(
            self.shape, self.curve, self.sibling_catch, self.sibling_score, self.draft_confidence
        )

    def tree_verify_seconds(self, layers: int, heads: float) -> float:
        """What verifying a tree costs beyond verifying a chain of its tokens, once a step.

        SGLang verifies a chain (topk 1) as ordinary decode tokens, but a tree through an
        attention with a custom mask (each draft token sees the prefix and its own branch:
        ``EagleVerifyInput.custom_mask`` from ``build_tree_kernel_efficient``). At a small batch
        that kernel runs on a few thread blocks whose work grows with the tree's query rows and
        the query `heads` on the GPU, in every one of the `layers`, not with the batch: it weighs
        at batch 1 (SGLang's docs: EAGLE-2 (3,4,16) 1.54x, EAGLE-3 (5,8,32) 2.36x; SDB's
        depth-3 21-token tree 1.85x against the chain's 1.65x) and vanishes beside the
        compute-bound verify of a large batch.
        """
        return tree_verify_seconds(self.shape, self.tree_verify_s, layers, heads)

    def with_shape(self, shape: SpecShape) -> SpecConfig:
        return replace(self, shape=shape)

    def accept_length_quantile(self, q: float) -> int:
        """The accept length at quantile `q` of its distribution (a low `q`: a bad step).

        The simulator draws each verify step's accept length from a chain at
        ``chain_rate(accept_length)``: k tokens with chance a^(k-1)(1-a), all of them a^n.
        An inter-token gap's p90 is a step's time over the length at the 10th percentile (each
        step yields one gap of step / k), not over the mean; below a rate of 0.9 that is 1.
        """
        steps = self.shape.num_steps
        rate = chain_rate(self.accept_length, steps)
        below = 0.0
        for k in range(1, steps + 1):
            below += rate ** (k - 1) * (1 - rate)
            if below >= q:
                return k
        return steps + 1


def tree_verify_seconds(shape: SpecShape, per_token_s: float, layers: int, heads: float) -> float:
    """A tree's masked verify (``SpecConfig.tree_verify_seconds``) at `per_token_s` a tree token,
    layer and GPU query head: the one formula the simulator and bench/speculative's fit share."""
    if shape.topk <= 1:
        return 0.0
    return per_token_s * layers * heads * max(0, shape.draft_tokens - 1)


def canonical_algorithm(name: str, catalog: PerfCatalog | None = None) -> str:
    key = name.upper()
    return (catalog or perf_catalog()).speculative.aliases.get(key, key)


def default_shape(
    algorithm: str,
    architecture: str,
    num_steps: int | None = None,
    topk: int | None = None,
    draft_tokens: int | None = None,
) -> SpecShape:
    """The shape SGLang 0.5.23 runs: per-architecture defaults when ``num_steps`` is unset.

    With ``topk == 1`` SGLang forces ``num_draft_tokens = num_steps + 1``; NGRAM drafts a
    12-token chain by default (breadth 1).
    """
    spec = perf_catalog().speculative
    if canonical_algorithm(algorithm) == "NGRAM":
        base = spec.ngram_shape
        tokens = draft_tokens or base.draft_tokens
        return SpecShape(num_steps=max(1, tokens - 1), topk=topk or base.topk, draft_tokens=tokens)
    if num_steps is None:
        chosen = spec.default_shape
        for row in spec.arch_shapes:
            if architecture in row.architectures:
                chosen = row
        return SpecShape(chosen.num_steps, chosen.topk, chosen.draft_tokens)
    k = topk or 1
    tokens = num_steps + 1 if k == 1 else (draft_tokens or num_steps + 1)
    return SpecShape(num_steps, k, tokens)


def _rank_share(p: float, rank: int, runner_up: float) -> float:
    """The chance (true or as the draft scores it) of a node's rank-`rank` child: the top one
    `p`; runner-up r takes `runner_up` of what is left after the ones above it."""
    if rank == 0:
        return p
    return (1.0 - p) * runner_up * (1.0 - runner_up) ** (rank - 1)


def _score_share(p: float, rank: int, runner_up: float) -> float:
    """The draft's own score of a node's rank-`rank` child: as ``_rank_share``, but never above
    a higher rank's (the draft's top candidate is its best-scored by definition, so a runner-up
    never outranks it however little the top one is accepted)."""
    return min(_rank_share(p, r, runner_up) for r in range(rank + 1))


# Pure in hashable arguments; the optimizer asks it for the same few shapes thousands of times.
@lru_cache(maxsize=4096)
def expected_accept_length(
    shape: SpecShape,
    curve: Curve,
    sibling_catch: float,
    sibling_score: float,
    draft_confidence: float = 1.0,
) -> float:
    """Mean tokens one verify step yields (accepted drafts plus the bonus token).

    SGLang's tree: a beam of ``topk`` nodes, each expanded into ``topk`` children per step; the
    best ``topk`` children by cumulative draft score form the next beam; the verified tree is
    the ``draft_tokens - 1`` best of every node made. The accepted length is the number of
    verified nodes on the target's path, so its mean is the sum of each verified node's true
    path probability. A chain (topk 1) reduces to 1 + p1 + p1 p2 + ...

    The draft scores its top candidate at ``draft_confidence`` times the chance it is accepted
    (its softmax is flatter than greedy verification is strict) and a runner-up from what is
    left of its score, so the ranking that picks the verified nodes is the draft's, while what
    they are worth is the target's. A tree's mean is over requests whose first levels are each
    sure or unsure (``_sure_and_unsure``): the pick and the worth move together per request.
    """
    budget = max(0, shape.draft_tokens - 1)  # draft tokens besides the verified root
    depth = min(shape.num_steps, budget)
    if depth == 0:
        return 1.0
    k = max(1, shape.topk)
    levels = [curve.at(level) for level in range(1, depth + 1)]
    tree = (k, budget, sibling_catch, sibling_score, draft_confidence)
    if k == 1:  # a chain verifies every level: its mean over sure and unsure levels is its curve's
        return _accept_length_given(levels, *tree)
    shallow, deep = levels[:MIXED_LEVELS], levels[MIXED_LEVELS:]
    states = itertools.product(*[_sure_and_unsure(p) for p in shallow], *[(p,) for p in deep])
    lengths = [_accept_length_given(list(ps), *tree) for ps in states]
    return sum(lengths) / len(lengths)


def _sure_and_unsure(p: float) -> tuple[float, float]:
    """A level's acceptance in a request where the draft is sure and in one where it is unsure,
    each half the time (their mean is the curve's `p`); both rise with `p`."""
    spread = SURE_SPREAD * min(p, 1.0 - p)
    return p + spread, p - spread


def _accept_length_given(
    levels: list[float],
    k: int,
    budget: int,
    sibling_catch: float,
    sibling_score: float,
    draft_confidence: float,
) -> float:
    """The mean accept length of one request whose levels accept their top candidate with
    `levels` (see ``expected_accept_length``)."""
    beam: list[tuple[float, float]] = [(1.0, 1.0)]  # (draft score, true probability)
    made: list[tuple[float, float]] = []
    for p in levels:
        q = _top_score(p, draft_confidence, sibling_score)
        children = [
            (score * _score_share(q, r, sibling_score), prob * _rank_share(p, r, sibling_catch))
            for score, prob in beam
            for r in range(k)
        ]
        children.sort(key=lambda node: -node[0])
        beam = children[:k]
        made.extend(children)
    weights = _verify_chances([math.log(score) for score, _ in made], budget, SCORE_NOISE)
    return 1.0 + sum(w * prob for w, (_, prob) in zip(weights, made, strict=True))


def _top_score(p: float, draft_confidence: float, sibling_score: float) -> float:
    """The draft's score of its top candidate at a level whose top is accepted with `p`.

    ``draft_confidence * p``, but never below its runner-up's ``(1 - q) * sibling_score``: the
    top candidate is the draft's best-scored one by definition, so a draft that is rarely right
    still puts ``sibling_score / (1 + sibling_score)`` on it. Below that floor a better draft
    changes what its tree is worth, not how it ranks the tree's nodes.
    """
    return min(1.0, max(draft_confidence * p, sibling_score / (1.0 + sibling_score)))


def _verify_chances(log_scores: list[float], budget: int, noise: float) -> list[float]:
    """Each made node's chance to be among the `budget` that SGLang verifies.

    SGLang verifies the ``budget`` best-scored nodes, but one request's draft scores stray from
    the curve's (by about `noise`, in log score), so a node near the cut is verified in some
    requests and not in others: its chance is a logistic of its log score less a threshold set
    so the chances add up to the budget (a smooth top-k). On mean scores a hard cut makes the
    accept length jump where a better draft lifts a deep node just above a likelier sibling;
    the mean over requests moves continuously.
    """
    if budget >= len(log_scores):
        return [1.0] * len(log_scores)
    ranked = sorted(log_scores, reverse=True)
    threshold = _smooth_cut(ranked, budget, noise)
    return [_logistic((x - threshold) / noise) for x in log_scores]


def _smooth_cut(ranked: list[float], budget: int, noise: float) -> float:
    """The threshold at which the chances of `ranked` (best first) add up to `budget`.

    Newton's method from the hard cut, kept inside a shrinking bracket (a bisection step where
    Newton would leave it): the chances' sum falls smoothly as the threshold rises, so it
    settles in a few steps where plain bisection took 40 (a tree's pick is made for every sure
    and unsure request, so this runs 8 times a tree).
    """
    low, high = ranked[-1] - 30 * noise, ranked[0] + 30 * noise
    threshold = (ranked[budget - 1] + ranked[budget]) / 2 if budget > 0 else low
    for _ in range(60):
        chances = [_logistic((x - threshold) / noise) for x in ranked]
        excess = sum(chances) - budget
        if excess > 0:
            low = threshold
        else:
            high = threshold
        slope = sum(c * (1.0 - c) for c in chances) / noise  # minus the sum's derivative
        step = threshold + excess / slope if slope > 0 else (low + high) / 2
        if not low < step < high:
            step = (low + high) / 2
        if abs(step - threshold) < 1e-12 or high - low < 1e-12:
            return step
        threshold = step
    return threshold


def _logistic(x: float) -> float:
    if x > 30:
        return 1.0
    if x < -30:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


@lru_cache(maxsize=4096)
def chain_rate(length: float, steps: int) -> float:
    """The per-step rate of a plain chain of ``steps`` with the same mean length.

    The simulator samples accept lengths from a chain; this keeps its mean where the tree
    model puts it.
    """
    if steps <= 0 or length <= 1.0:
        return 0.0
    if length >= steps + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid**i for i in range(steps + 1)) < length:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def pair_curve(
    name: str,
    target: ModelShape,
    draft: ModelShape | None,
    workload: str | None = None,
    catalog: PerfCatalog | None = None,
) -> Curve:
    """The catalogue's curve for (target, draft, workload), else the algorithm family's."""
    cat = catalog or perf_catalog()
    targets = {n.lower() for n in _names(target)}
    drafts: set[str | None] = {n.lower() for n in _names(draft)} if draft else {""}
    row = cat.pair_curve(targets, drafts, workload)
    if row is not None and canonical_algorithm(row.algorithm, cat) == name:
        return Curve.of(row)
    family = cat.family_curve(name) or cat.family_curve("EAGLE3")
    assert family is not None  # the fit always holds EAGLE3
    return Curve.of(family)


def _names(model: ModelShape) -> tuple[str, ...]:
    """A model's spellings: catalogue id, repository and the repository's name."""
    return (model.id, model.hf_repo, model.hf_repo.rsplit("/", 1)[-1])


def resolve_spec(
    algorithm: str,
    target: ModelShape,
    draft: ModelShape | None,
    *,
    num_steps: int | None = None,
    topk: int | None = None,
    draft_tokens: int | None = None,
    acceptance: float | None = None,
    workload: str | None = None,
    engine: str = DEFAULT_ENGINE,
) -> SpecConfig:
    """The speculative configuration of `target` with `draft`; ``acceptance`` sets the first
    position's acceptance, keeping the curve's form (the simulator's
    ``--sim-spec-accept-rate``)."""
    catalog = perf_catalog()
    name = canonical_algorithm(algorithm, catalog)
    if catalog.algorithm(name) is None:
        name = "EAGLE"
    shape = default_shape(name, target.architecture, num_steps, topk, draft_tokens)
    curve = pair_curve(name, target, draft, workload, catalog)
    if acceptance is not None:
        curve = curve.scaled_to(acceptance)
    fit = catalog.speculative.fit
    cost = fit.engines[engine]
    per_pass = cost.ngram_us if name == "NGRAM" else cost.draft_pass_us
    return SpecConfig(
        algorithm=name,
        shape=shape,
        curve=curve,
        sibling_catch=fit.tree.sibling_catch,
        sibling_score=fit.tree.sibling_score,
        draft_confidence=fit.tree.draft_confidence,
        tree_verify_s=cost.tree_verify_ns * 1e-9,
        draft_overhead_s=per_pass * 1e-6,
        verify_overhead_s=cost.verify_token_us * 1e-6,
        step_overhead_s=cost.step_us * 1e-6,
        draft=None if name == "NGRAM" else draft,
    )
