"""Speculative decoding physics: draft shapes, acceptance, and what drafting costs.

A verify step yields the bonus token plus every draft token accepted in a row. The chance that
the draft at depth ``i`` is accepted is the (target, draft) pair's first-position acceptance,
decayed per depth by the algorithm (EAGLE-2 heads drift from the target's features with depth;
EAGLE-3's training-time test keeps them close). A tree with ``topk`` branches gives each depth a
few correlated candidates: each extra branch adds ``tree_gain`` of an independent chance. The
draft token budget caps how many depths the tree reaches. All constants live in
``runtime/catalog/perf.yaml`` with their sources.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.catalog.perf import PerfCatalog, perf_catalog
from runtime.perf.hardware import ModelShape

EAGLE_HEADS = frozenset({"EAGLE", "EAGLE3"})


@dataclass(frozen=True)
class SpecShape:
    """SGLang's (num_steps, eagle_topk, num_draft_tokens) after its defaulting rules."""

    num_steps: int
    topk: int
    draft_tokens: int


@dataclass(frozen=True)
class SpecConfig:
    """Everything the step-time model needs to know about one speculative configuration."""

    algorithm: str  # canonical name: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM
    shape: SpecShape
    acceptance: float  # chance the first draft position is accepted
    depth_decay: float
    tree_gain: float
    draft_overhead_s: float  # per draft pass (NGRAM: per step), beyond the draft's weights
    verify_overhead_s: float  # per verified draft token
    draft: ModelShape | None  # the draft network (None for NGRAM; NEXTN uses a target layer)

    @property
    def accept_length(self) -> float:
        return expected_accept_length(self.shape, self.acceptance, self.depth_decay, self.tree_gain)

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


def expected_accept_length(
    shape: SpecShape, acceptance: float, depth_decay: float, tree_gain: float
) -> float:
    """Mean tokens one verify step yields (accepted drafts plus the bonus token)."""
    nodes = max(0, shape.draft_tokens - 1)  # draft tokens besides the verified root
    depth = min(shape.num_steps, nodes)
    if depth == 0:
        return 1.0
    branches = min(float(shape.topk), max(1.0, nodes / depth))
    length, reach = 1.0, 1.0
    for i in range(depth):
        single = min(0.999, acceptance * depth_decay**i)
        tries = 1.0 + tree_gain * (branches - 1.0)
        reach *= 1.0 - (1.0 - single) ** tries
        length += reach
    return length


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


def resolve_spec(
    algorithm: str,
    target: ModelShape,
    draft: ModelShape | None,
    *,
    num_steps: int | None = None,
    topk: int | None = None,
    draft_tokens: int | None = None,
    acceptance: float | None = None,
) -> SpecConfig:
    """The speculative configuration of `target` with `draft`; ``acceptance`` overrides the
    catalogue's figure for the pair (the simulator's ``--sim-spec-accept-rate``)."""
    catalog = perf_catalog()
    name = canonical_algorithm(algorithm, catalog)
    row = catalog.algorithm(name) or catalog.algorithm("EAGLE")
    assert row is not None  # the catalogue always holds EAGLE
    shape = default_shape(name, target.architecture, num_steps, topk, draft_tokens)
    if acceptance is None:
        acceptance = catalog.pair_acceptance(target.id, draft.id if draft else None)
    return SpecConfig(
        algorithm=name,
        shape=shape,
        acceptance=acceptance if acceptance is not None else row.acceptance,
        depth_decay=row.depth_decay,
        tree_gain=row.tree_gain,
        draft_overhead_s=row.draft_overhead_us * 1e-6,
        verify_overhead_s=row.verify_overhead_us * 1e-6,
        draft=None if name == "NGRAM" else draft,
    )
