"""Speculative decoding against published points: fit on the `fit` rows, report the held-out rest.

Reads ``runtime/catalog/speculative/published_points.tsv`` (281 published points with a pointer
each; ``SOURCES.md`` beside it) and prices every `fit` and `holdout` row with runtime/perf's
model: the accept length of the row's (steps, topk, draft tokens) from its (target, draft,
workload) acceptance curve, and the speedup

    AL x decode_step(batch) / (draft passes + verify_step(batch x draft tokens) + fixed costs)

with the target's forward passes from ``runtime/perf/step.py`` (the row's GPU and TP).

Free constants, fitted on the `fit` rows only (deterministic coordinate descent on a log-error
least squares, no randomness):
- per (target, draft, workload) block: its curve's level (EAGLE-3/STANDALONE: a flat rate;
  EAGLE/NEXTN: the first position, the family's decay after it; NGRAM: first and rest);
- per family: EAGLE's and NEXTN's decay with depth;
- the tree: sibling_catch (how often the target's token is a runner-up), sibling_score (how
  highly the draft scores runner-ups) and draft_confidence (the draft's score of its top
  candidate over its greedy acceptance: below 1, a small budget goes to siblings before depth);
- per engine (SGLang, vLLM): a fixed cost per draft pass, per speculative step, and per
  verified token; for SGLang also a tree's masked verify (``tree_verify_ns``, per tree token,
  target layer and query head on a GPU, once a step), fitted last with the acceptance side held
  (only tree rows' speeds against their runs' chains see it);
- per SpecBundle baseline run (target, workload, batch): the run's measured rate over the
  physics' decode rate. SpecBundle divides all five shapes of a run by one baseline run, timed
  over the whole run (prefill included) on a deployment it does not publish, so the run's rate
  is one unknown its fit rows ((3,1,4), (5,1,6), (7,4,8)) set and its held-out shapes share;
  acceptance is left to the published accept lengths and the shapes' differences.

Each source's rows weigh one over their count in the loss: a source is one independent
measurement (its rows share a harness, a deployment and a baseline), so SpecBundle's hundred
rows do not outvote SDB's trees on the tree constants.

With ``--write`` the fitted constants go to ``runtime/catalog/speculative/fitted.yaml`` with the
date and the fit's row ids. Then it prints every held-out row, published vs model, the median and
max absolute relative error per source and overall, the batch-consistency table, and the
model's best draft shape per batch over SGLang's usual grid (steps 1-7, topk 1/2/4/8, draft
tokens up to 16).

The batch-consistency table reads each published speedup back into the accept length it implies
under the step physics. At temperature 0 acceptance does not depend on the batch, so a block's
shape published at several batches should imply one accept length; where the implied lengths are
more than 1.25x apart no acceptance model meets the max target on all of them, and a point that
implies more than its tree's depth + 1 is beyond any acceptance: only the step costs at its batch
(or the published run's unpublished setup) could explain it.

    .venv/bin/python bench/speculative.py            # report with the catalogue's constants
    .venv/bin/python bench/speculative.py --write    # refit, write the catalogue, report
    .venv/bin/python bench/speculative.py --leave-out SDB   # refit without one source, judge it
    .venv/bin/python bench/speculative.py --reference-bound # the misses priced with AIC's steps

This file is the report and the entry point; the parts beside it are the published points
(``speculative_points.py``), the model that prices a point (``speculative_model.py``), and the
fit with the catalogue it reads and writes (``speculative_fit.py``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.calibration import AIC_MODELS, aic_requests  # noqa: E402
from bench.calibration import Point as CalPoint  # noqa: E402
from bench.references import AIC, ensure, query_reference  # noqa: E402
from bench.speculative_fit import (  # noqa: E402
    FAMILY_OF_DRAFT,
    FITTED,
    fit,
    params_from_catalogue,
    write_catalogue,
)
from bench.speculative_model import (  # noqa: E402
    Params,
    accept_length,
    implied_accept_length,
    speedup,
)
from bench.speculative_points import Point, load_points, target_shape  # noqa: E402
from runtime.catalog.perf import perf_catalog  # noqa: E402
from runtime.perf.spec import SpecShape  # noqa: E402

MEDIAN_TARGET, MAX_TARGET = 0.10, 0.25


def errors(points: list[Point], params: Params) -> list[tuple[Point, str, float, float]]:
    out = []
    for p in points:
        if p.speedup is not None:
            out.append((p, "speedup", p.speedup, speedup(p, params)))
        if p.accept_length is not None:
            out.append((p, "accept", p.accept_length, accept_length(p, params)))
    return out


def summary(rows: list[tuple[Point, str, float, float]]) -> tuple[float, float]:
    errs = [abs(model / pub - 1) for _, _, pub, model in rows]
    return (statistics.median(errs), max(errs)) if errs else (0.0, 0.0)


def held_out_summary(params: Params | None = None) -> dict[str, tuple[float, float, int]]:
    """{source or 'overall' (+ ':accept' for accept lengths): (median, max, n)} on `holdout`."""
    points = load_points()
    params = params or params_from_catalogue(points)
    rows = errors([p for p in points if p.split == "holdout"], params)
    out = {}
    for metric in ("speedup", "accept"):
        chosen = [r for r in rows if r[1] == metric]
        suffix = "" if metric == "speedup" else ":accept"
        for source in [*sorted({r[0].source for r in chosen}), "overall"]:
            part = [r for r in chosen if source in ("overall", r[0].source)]
            med, worst = summary(part)
            out[source + suffix] = (med, worst, len(part))
    return out


def print_rows(points: list[Point], params: Params, split: str) -> None:
    print(f"\n== {split} rows: published vs model ==")
    head = f"{'point':<26}{'source':<7}{'alg':<7}{'shape':<9}{'bs':>5}  {'metric':<8}"
    print(head + f"{'pub':>7}{'model':>7}{'err':>8}")
    for p, metric, pub, model in errors([q for q in points if q.split == split], params):
        s = p.shape
        flag = "  <-- over 25%" if abs(model / pub - 1) > MAX_TARGET else ""
        shape = f"{s.num_steps},{s.topk},{s.draft_tokens}"
        print(f"{p.id:<26}{p.source:<7}{p.algorithm:<7}{shape:<9}{p.batch:>5}  {metric:<8}"
              f"{pub:>7.2f}{model:>7.2f}{model / pub - 1:>+8.1%}{flag}")  # fmt: skip


def print_summary(params: Params) -> bool:
    print("\n== held-out error (|model / published - 1|) ==")
    print(f"{'source':<16}{'n':>4}{'median':>9}{'max':>9}")
    table = held_out_summary(params)
    for key, (med, worst, n) in table.items():
        print(f"{key:<16}{n:>4}{med:>9.1%}{worst:>9.1%}")
    med, worst, _ = table["overall"]
    ok = med <= MEDIAN_TARGET and worst <= MAX_TARGET
    print(f"speedup: median {med:.1%} (target {MEDIAN_TARGET:.0%}), max {worst:.1%} "
          f"(target {MAX_TARGET:.0%}): {'met' if ok else 'NOT met'}")  # fmt: skip
    return ok


GRID = [
    SpecShape(steps, topk, tokens)
    for steps in range(1, 8)
    for topk in (1, 2, 4, 8)
    for tokens in ([steps + 1] if topk == 1 else range(steps + 2, 17))
]


def best_shape(point: Point, params: Params, batch: int) -> tuple[SpecShape, float]:
    """The fastest shape at `batch`; among shapes within 1% of it, the fewest draft tokens (a
    tree whose extra nodes gain nothing is not worth its verification)."""
    at = replace(point, batch=batch)
    scored = [(s, speedup(at, params, s)) for s in GRID]
    top = max(value for _, value in scored)
    near = [(s, v) for s, v in scored if v >= 0.99 * top]
    return min(near, key=lambda x: (x[0].draft_tokens, -x[1]))


def print_best_shapes(points: list[Point], params: Params) -> None:
    print("\n== the model's best draft shape per batch (steps 1-7, topk 1/2/4/8, tokens <= 16) ==")
    cases = {
        "Llama-3.1-8B EAGLE3 H100": next(p for p in points if p.id == "SDB-F1-01"),
        "Qwen3-8B EAGLE3 H100": next(p for p in points if p.id == "SDB-F2-01"),
        "Llama-3-70B EAGLE TP4 H100": next(p for p in points if p.id == "SDB-F2-13"),
    }
    for label, point in cases.items():
        point = replace(point, engine="sglang")
        cells = []
        for batch in (1, 2, 4, 8, 16, 32, 64, 128):
            shape, value = best_shape(point, params, batch)
            cells.append(
                f"bs{batch}: ({shape.num_steps},{shape.topk},{shape.draft_tokens}) {value:.2f}x"
            )
        print(f"{label}\n    " + "\n    ".join(cells))


def batch_consistency(points: list[Point], params: Params) -> list[list[tuple[Point, float]]]:
    """Per (block, shape, engine, GPU, TP) published at more than one batch: each point with the
    accept length it implies (``implied_accept_length``), by batch."""
    groups: dict[tuple[object, ...], list[tuple[Point, float]]] = {}
    for p in points:
        if p.speedup is None:
            continue
        key = (p.block, p.shape, p.engine, p.gpu, p.tp, p.attn_dp)
        groups.setdefault(key, []).append((p, implied_accept_length(p, params)))
    return [
        sorted(rows, key=lambda r: r[0].batch)
        for rows in groups.values()
        if len({p.batch for p, _ in rows}) > 1
    ]


def print_batch_consistency(points: list[Point], params: Params) -> None:
    """The blocks whose points imply accept lengths more than 1.25x apart across batches: no
    batch-independent acceptance fits them all within the max target. A point that implies more
    than its tree's depth + 1 (every draft accepted, plus the bonus token) is beyond any
    acceptance under the step physics: only the step costs at its batch could move it."""
    print("\n== batch consistency: the accept length each point implies, by batch ==")
    for rows in batch_consistency(points, params):
        implied = [a for _, a in rows]
        if max(implied) <= 1.25 * min(implied):
            continue
        p0 = rows[0][0]
        s = p0.shape
        spread = max(implied) / min(implied)
        shape = f"({s.num_steps},{s.topk},{s.draft_tokens})"
        print(f"{' / '.join(p0.block)} {shape} {p0.gpu} TP{p0.tp}: spread {spread:.2f}x")
        for p, al in rows:
            beyond = "  <-- beyond any acceptance" if al > s.num_steps + 1 else ""
            print(f"    bs{p.batch:<4} {p.id:<14} {p.split:<8} implies {al:.2f}{beyond}")


def print_reference_bound(points: list[Point], params: Params) -> None:
    """The held-out speedups beyond the max target, priced with AIConfigurator's own steps
    instead of runtime/perf's: the accept length each needs with drafting free and the verify
    pass no dearer than a prefill of the same tokens (a floor: no KV read, no LM head), and the
    step that length would mean at the same tree's batch-1 point (AL x AIC's decode step over
    the published speedup), beside AIC's decode step there. A need near or above the tree's
    depth + 1, or a batch-1 step far above AIC's, is a point no step physics near AIC's meets
    with one acceptance per tree."""
    over = [p for p, metric, pub, model in errors(points, params) if metric == "speedup"
            and p.split == "holdout" and abs(model / pub - 1) > MAX_TARGET
            and target_shape(p.target).id in AIC_MODELS]  # fmt: skip
    firsts = {(p.block, p.shape, p.gpu, p.tp): p for p in points if p.batch == 1 and p.speedup}
    pairs = [(p, firsts.get((p.block, p.shape, p.gpu, p.tp))) for p in over]
    asked: list[CalPoint] = []
    for p in over:
        model = target_shape(p.target).id
        tokens = p.batch * p.shape.draft_tokens
        asked += [CalPoint(model, p.gpu, p.tp, None, "auto", "decode", p.batch, p.context),
                  CalPoint(model, p.gpu, p.tp, None, "auto", "prefill", 1, tokens),
                  CalPoint(model, p.gpu, p.tp, None, "auto", "decode", 1, p.context)]  # fmt: skip
    ms = [float(str(a["ms"])) for a in query_reference(AIC, ensure(AIC), aic_requests(asked))]
    print("\n== the points over the max target, priced with AIC 0.12's own steps ==")
    for i, (p, first) in enumerate(pairs):
        base, verify, single = ms[3 * i : 3 * i + 3]
        need = p.speedup * verify / base  # type: ignore[operator]
        line = (f"{p.id:<12} bs{p.batch}: AIC decode {base:.2f} ms, prefill of "
                f"{p.batch * p.shape.draft_tokens} tokens {verify:.2f} ms: needs AL >= "
                f"{need:.2f} (depth + 1 = {p.shape.num_steps + 1})")  # fmt: skip
        if first is not None and first.speedup:
            step = need * single / first.speedup
            line += (f"; at that AL its bs1 point ({first.id}, {first.speedup:.2f}x) means a "
                     f"{step:.1f} ms step, AIC's decode step {single:.2f} ms")  # fmt: skip
        print(line)


def leave_source_out(points: list[Point], source: str) -> None:
    """Refit without any row of `source` (its pairs fall back to their family's curve, its
    engine costs to what the other sources fit) and judge the fit on its rows of the algorithms
    the others fit; the catalogue is not written."""
    params = fit([p for p in points if p.source != source])
    left = [replace(p, split="holdout") for p in points if p.source == source]
    judged = [p for p in left if p.algorithm in params.families]
    if len(judged) < len(left):  # e.g. SDB holds every NGRAM row: nothing to judge them by
        print(f"{len(left) - len(judged)} rows of an algorithm no other source fits: not judged")
    print_rows(judged, params, "holdout")
    for metric in ("speedup", "accept"):
        rows = [r for r in errors(judged, params) if r[1] == metric]
        if rows:
            med, worst = summary(rows)
            print(f"{source} left out, {metric}: n {len(rows)}, median {med:.1%}, max {worst:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="refit and write fitted.yaml")
    parser.add_argument("--fit-rows", action="store_true", help="also print the fit rows")
    parser.add_argument(
        "--leave-out", metavar="SOURCE", help="refit without SOURCE's rows and judge them (slow)"
    )
    parser.add_argument(
        "--reference-bound",
        action="store_true",
        help="price the held-out points over the max target with AIConfigurator's own steps",
    )
    args = parser.parse_args()
    points = load_points()
    if args.leave_out:
        leave_source_out(points, args.leave_out)
        return
    if args.write:
        params = fit(points)
        write_catalogue(points, params)
        perf_catalog.cache_clear()
        print(f"wrote {FITTED.relative_to(REPO)}")
    params = params_from_catalogue(points)
    for p in points:
        FAMILY_OF_DRAFT.setdefault(p.block[1], p.algorithm)
    print(
        f"tree: sibling_catch {params.sibling_catch:.3f}, sibling_score {params.sibling_score:.3f}"
        f", draft_confidence {params.draft_confidence:.3f}"
    )
    for engine, cost in params.engines.items():
        print(f"{engine}: " + ", ".join(f"{k} {v:.1f}" for k, v in cost.items()))
    for name, curve in sorted(params.families.items()):
        print(
            f"family {name}: first {curve.first:.3f} rest {curve.rest:.3f} decay {curve.decay:.3f}"
        )
    if args.fit_rows:
        print_rows(points, params, "fit")
        print(
            "fit (median, max):", summary(errors([p for p in points if p.split == "fit"], params))
        )
    print_rows(points, params, "holdout")
    print_summary(params)
    print_batch_consistency(points, params)
    print_best_shapes(points, params)
    if args.reference_bound:
        print_reference_bound(points, params)


if __name__ == "__main__":
    main()
