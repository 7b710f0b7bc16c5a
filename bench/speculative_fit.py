"""The fit of bench/speculative.py on the `fit` rows (deterministic coordinate descent on a
log-error least squares, golden section per constant), and the catalogue it is read from and
written to (``runtime/catalog/speculative/fitted.yaml``).
"""

from __future__ import annotations

import datetime
import math
import statistics
import sys
from collections.abc import Callable

import yaml

from bench.speculative_model import (
    Params,
    accept_length,
    baseline_run,
    block_curve,
    curve_of,
    speedup,
)
from bench.speculative_points import REPO, Key, Point
from runtime.catalog.perf import perf_catalog
from runtime.perf.spec import Curve

FITTED = REPO / "runtime" / "catalog" / "speculative" / "fitted.yaml"
FAMILIES = ("EAGLE", "EAGLE3", "NEXTN", "NGRAM")


def _residuals(point: Point, params: Params) -> list[float]:
    out = []
    if point.accept_length is not None:
        out.append(math.log(accept_length(point, params) / point.accept_length))
    if point.speedup is not None:
        out.append(math.log(speedup(point, params) / point.speedup))
    curve = block_curve(point, params)
    for depth, value in enumerate(point.conditional, start=1):
        out.append(math.log(curve.at(depth) / value))
    return out


def _loss(points: list[Point], params: Params) -> float:
    """The squared log errors, each source's rows weighted by one over their count: the sources
    are the independent measurements (a source's rows share its harness, deployment and
    baseline), so SpecBundle's 100-odd rows count as one group beside SDB's or AMD's few."""
    count: dict[str, int] = {}
    for p in points:
        count[p.source] = count.get(p.source, 0) + 1
    return sum(sum(r * r for r in _residuals(p, params)) / count[p.source] for p in points)


def _golden(f: Callable[[float], float], low: float, high: float, iters: int = 28) -> float:
    """The minimum of a unimodal `f` on [low, high] (golden-section search, deterministic)."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return (a + b) / 2


def _fit_baselines(fit: list[Point], params: Params) -> None:
    """Each unpublished baseline run's rate (``baseline_run``) from its fit rows' speedups, the
    rest held: the geometric mean of model over published with the run's rate at 1 (the least
    squares of the log error, in closed form), bounded to [0.5, 2]."""
    runs: dict[str, list[Point]] = {}
    for p in fit:
        run = baseline_run(p)
        if run is not None and p.speedup is not None and p.block in params.levels:
            runs.setdefault(run, []).append(p)
    for run, rows in sorted(runs.items()):
        params.baseline_runs[run] = 1.0
        logs = [math.log(speedup(p, params) / p.speedup) for p in rows if p.speedup]
        params.baseline_runs[run] = min(2.0, max(0.5, math.exp(statistics.fmean(logs))))


def _fit_levels(fit: list[Point], params: Params) -> None:
    """Each block's level from its own fit rows, the globals held; then the baseline runs'
    rates (which move every speedup of a run alike, so acceptance is left to the shapes'
    differences and the published accept lengths)."""
    _fit_baselines(fit, params)
    blocks: dict[Key, list[Point]] = {}
    for p in fit:
        blocks.setdefault(p.block, []).append(p)
    for block, rows in sorted(blocks.items()):
        algorithm = rows[0].algorithm
        first, rest = params.levels.get(block, (0.7, 0.8))

        def with_first(
            x: float, rest: float = rest, block: Key = block, rows: list[Point] = rows
        ) -> float:
            params.levels[block] = (x, rest)
            return _loss(rows, params)

        first = _golden(with_first, 0.05, 0.97, iters=20)
        params.levels[block] = (first, rest)
        if algorithm not in ("EAGLE", "NEXTN"):

            def with_rest(
                x: float, first: float = first, block: Key = block, rows: list[Point] = rows
            ) -> float:
                params.levels[block] = (first, x)
                return _loss(rows, params)

            rest = _golden(with_rest, 0.05, 0.97, iters=20)
            params.levels[block] = (first, rest)
            first = _golden(with_first, 0.05, 0.97, iters=20)
            params.levels[block] = (first, rest)
    _fit_baselines(fit, params)
    _family_defaults(params)


def _family_defaults(params: Params) -> None:
    """Each family's curve for pairs without one: the median block level."""
    for family in FAMILIES:
        levels = [lv for (t, d, w), lv in params.levels.items() if _family_of(d) == family]
        if not levels:
            continue
        first = statistics.median(lv[0] for lv in levels)
        rest = statistics.median(lv[1] for lv in levels)
        params.families[family] = curve_of(family, (first, rest), params)


FAMILY_OF_DRAFT: dict[str, str] = {}


def _family_of(draft: str) -> str:
    return FAMILY_OF_DRAFT.get(draft, "EAGLE3")


GLOBALS: list[tuple[str, float, float]] = [
    ("sibling_catch", 0.0, 0.6),
    ("sibling_score", 0.0, 0.95),
    ("sibling_draft_confidence", 0.2, 1.0),
    ("decay:EAGLE", 0.5, 1.0),
    ("decay:NEXTN", 0.4, 1.0),
    ("sglang:draft_pass_us", 0.0, 3000.0),
    ("sglang:step_us", 0.0, 8000.0),
    ("sglang:verify_token_us", 0.0, 60.0),
    ("vllm:draft_pass_us", 0.0, 3000.0),
    ("vllm:step_us", 0.0, 8000.0),
    ("vllm:verify_token_us", 0.0, 60.0),
    ("vllm:ngram_us", 0.0, 8000.0),
]


def _set(params: Params, name: str, value: float) -> None:
    if name.startswith("decay:"):
        params.decay[name.split(":")[1]] = value
    elif ":" in name:
        engine, key = name.split(":")
        params.engines[engine][key] = value
    else:
        # sibling_draft_confidence: named with the tree's prefix so the tree's rows refit it
        setattr(params, name.replace("sibling_draft", "draft"), value)


def _affected(name: str, rows: list[Point]) -> list[Point]:
    """The fit rows a global moves (whole blocks, so their levels can be refitted)."""
    if name.startswith("decay:"):
        chosen = [p for p in rows if p.algorithm == name.split(":")[1]]
    elif ":" in name:
        chosen = [p for p in rows if p.engine == name.split(":")[0]]
    else:  # the tree: blocks with a tree row
        chosen = [p for p in rows if p.shape.topk > 1]
    blocks = {p.block for p in chosen}
    return [p for p in rows if p.block in blocks]


def fit(points: list[Point], rounds: int = 3) -> Params:
    """Coordinate descent on the globals (golden section each), deterministic. The tree and
    decay constants trade off against the curves' levels, so the levels of the blocks they touch
    are refitted inside their search; the cost constants alternate with a levels refit."""
    rows = [p for p in points if p.split == "fit"]
    for p in rows:
        FAMILY_OF_DRAFT[p.block[1]] = p.algorithm
    params = Params()
    _fit_levels(rows, params)
    for round_ in range(rounds):
        for name, low, high in GLOBALS:
            subset = _affected(name, rows)
            inner = name.startswith(("decay:", "sibling"))

            def loss(
                x: float, name: str = name, subset: list[Point] = subset, inner: bool = inner
            ) -> float:
                _set(params, name, x)
                if inner:
                    _fit_levels(subset, params)
                return _loss(subset, params)

            _set(params, name, _golden(loss, low, high, iters=14 if inner else 18))
            _fit_levels(rows, params)
        print(f"round {round_ + 1}: loss {_loss(rows, params):.3f}", file=sys.stderr)
    _fit_tree_verify(rows, params)
    return params


def _fit_tree_verify(rows: list[Point], params: Params) -> None:
    """SGLang's cost of verifying a tree over a chain (``tree_verify_ns``), fitted last with the
    acceptance side held: it is seen only in the speed of tree rows against chain rows of the
    same runs, which the tree's acceptance constants would otherwise absorb (a dearer tree
    bought back by a tree that accepts more, neither checked by a published accept length)."""
    subset = _affected("sglang:tree_verify_ns", [p for p in rows if p.shape.topk > 1])

    def loss(x: float) -> float:
        _set(params, "sglang:tree_verify_ns", x)
        return _loss(subset, params)

    _set(params, "sglang:tree_verify_ns", _golden(loss, 0.0, 500.0, iters=18))
    _fit_levels(rows, params)
    print(f"tree verify: loss {_loss(rows, params):.3f}", file=sys.stderr)


# ---- catalogue in and out ------------------------------------------------------------------------
def params_from_catalogue(points: list[Point]) -> Params:
    fitted = perf_catalog().speculative.fit
    params = Params(
        sibling_catch=fitted.tree.sibling_catch,
        sibling_score=fitted.tree.sibling_score,
        draft_confidence=fitted.tree.draft_confidence,
        engines={k: v.model_dump() for k, v in fitted.engines.items()},
    )
    for name, row in fitted.families.items():
        params.families[name] = Curve.of(row)
        if row.decay < 1:
            params.decay[name] = row.decay
    params.baseline_runs = dict(fitted.baseline_runs)
    for row in fitted.curves:
        level = (row.first, row.rest)
        params.levels[(row.target, row.draft or "", row.workload)] = level
    return params


def write_catalogue(points: list[Point], params: Params) -> None:
    fit_ids = [p.id for p in points if p.split == "fit"]
    blocks: dict[tuple[str, str, str], list[str]] = {}
    for p in points:
        if p.split == "fit":
            blocks.setdefault(p.block, []).append(p.id)
    curves = []
    for block, ids in sorted(blocks.items()):
        target, draft, workload = block
        algorithm = FAMILY_OF_DRAFT[draft]
        c = curve_of(algorithm, params.levels[block], params)
        curves.append({
            "target": target, "draft": draft, "workload": workload, "algorithm": algorithm,
            "first": round(c.first, 4), "rest": round(c.rest, 4), "decay": round(c.decay, 4),
            "source": "fitted to " + ", ".join(ids),
        })  # fmt: skip
    data = {
        "date": datetime.date.today().isoformat(),
        "command": ".venv/bin/python bench/speculative.py --write",
        "fit_rows": fit_ids,
        "tree": {"sibling_catch": round(params.sibling_catch, 4),
                 "sibling_score": round(params.sibling_score, 4),
                 "draft_confidence": round(params.draft_confidence, 4)},
        "engines": {e: {k: round(v, 2) for k, v in c.items()} for e, c in params.engines.items()},
        "families": {
            f: {"first": round(c.first, 4), "rest": round(c.rest, 4), "decay": round(c.decay, 4)}
            for f, c in sorted(params.families.items())
        },
        "curves": curves,
        "baseline_runs": {r: round(v, 4) for r, v in sorted(params.baseline_runs.items())},
    }  # fmt: skip
    header = (
        "# Written by bench/speculative.py --write: the speculative model's constants fitted\n"
        "# on the `fit` rows of published_points.tsv (ids in fit_rows; sources in SOURCES.md).\n"
        "# Do not edit by hand; rerun the bench. Curves: conditional acceptance per draft\n"
        "# depth, depth 1 = first, depth i >= 2 = rest x decay^(i-2). Names as published.\n"
    )
    FITTED.write_text(header + yaml.safe_dump(data, sort_keys=False, width=100))
