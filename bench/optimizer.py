"""Plinth's optimizer next to NVIDIA AIConfigurator 0.12 and aisimulate 0.13, on the same inputs.

For each case (model, GPU, GPU budget, prompt/answer lengths, TTFT and TPOT targets) each tool
searches for the layout that serves the most output tokens/s per GPU within the targets: each
reference with ``cli default --backend sglang``, Plinth with ``optimize(objective="throughput")``.
Every pick is priced by every model (Plinth's by both references, each reference's by Plinth and
by the other), and the ratio that matters is Plinth's pick under a reference's own model over
that reference's pick under it: at least 0.9x on the unseen dense, long-context and MLA MoE
cases (issue 27). Cases carry their kind and whether they are unseen; a verdict table ends the run.

How a pick crosses over. A pick is an engine configuration: layout (aggregated or P/D), TP per
side, weight and KV-cache formats, and for P/D the two pools' sizes. AIConfigurator prices an
aggregated Plinth pick with the sweep it runs for its own candidates, pinned to that TP and
those formats (``cli exp``), so it chooses the batch size as it does for its own; a P/D pick
with ``cli estimate --mode disagg`` at Plinth's exact pools, the decode batch being the one knob
it sweeps. Plinth prices AIConfigurator's pick with ``predict_layout``: that TP, those formats,
AIConfigurator's worker counts, loaded to its capacity within the SLOs. Attention data
parallelism crosses both ways: AIConfigurator's ``tp`` x ``dp`` is Plinth's TP group of those
GPUs with ``attn_dp`` = ``dp``, and a Plinth pick with attention DP is pinned in AIConfigurator
as ``tp`` = TP / DP, ``dp`` = DP. A MoE pick's experts cross as they were picked: whole
experts per GPU (Plinth ``ep`` = TP, AIConfigurator ``moe_ep`` = TP) or each expert sliced over
the TP GPUs (Plinth ``ep`` 1, AIConfigurator ``moe_tp`` = TP). DeepEP crosses too: where
AIConfigurator's large-EP data covers a row (DeepSeek-V3, pure EP, every GPU its own attention
rank) its search prices DeepEP, so that row is Plinth's ``moe_a2a`` "deepep"; a Plinth DeepEP
pick is pinned with the labels AIConfigurator's DeepEP data carries (FP8 block attention, FP8
KV), marked ``*`` when its KV cache is another format.

The SLOs are given to Plinth in AIConfigurator's terms: the TTFT target as Plinth's TTFT p90
and the TPOT target as a mean (``Slo.tpot_mean_s``, no p90 ITL bound), since AIConfigurator's
TPOT is a mean over the answer and it has no inter-token percentile.

The headline ratio compares like with like: Plinth searches the checkpoint's own formats with
P/D allowed (AIConfigurator's space). A second row gives Plinth's full search (online FP8, FP8
KV cache, speculative decoding) priced where AIConfigurator can: it has no SGLang FP8-KV
attention data and no EAGLE, so those parts are priced without them (marked ``*``) or not at
all. The Plinth-only cases at the end (EAGLE3, a custom architecture, FP4 KV cache) are outside
what AIConfigurator covers; they print Plinth's figures alone.

Where the figures still differ, and why DeepSeek-V3's ratio is what it is: ``bench/optimizer.md``.

The references run in their own venvs (``bench/references.py``), one fresh process per search
(its wall time includes loading its data, as the CLI's does); answers are kept per job, so a
rerun after a physics change asks them only to price Plinth's new picks.

    .venv/bin/python bench/optimizer.py [--cases 8,12]  # both references
    .venv/bin/python bench/optimizer.py --only-aic   # AIConfigurator alone
    .venv/bin/python bench/optimizer.py --no-aic     # Plinth's side only
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.calibration import AIC_SYSTEMS, MLA_MODELS  # noqa: E402
from bench.optimizer_picks import (  # noqa: E402
    AIC_KV,
    MODELS,
    Pick,
    aic_pick,
    disagg_job,
    pinned_config,
    plinth_pick,
)
from bench.references import AIC, REFERENCES, Tool, ask, ensure  # noqa: E402
from runtime import optimize as opt  # noqa: E402
from runtime.spec import Architecture  # noqa: E402

RATIO_TARGET, PLINTH_SECONDS_TARGET = 0.9, 2.0
# AIConfigurator's search space: the checkpoint's own formats, aggregated or P/D.
AS_SHIPPED: frozenset[opt.Feature] = frozenset({"disaggregation"})


@dataclass(frozen=True)
class Case:
    model: str
    gpu: str
    gpus: int  # the budget both tools size to (AIConfigurator's --total-gpus)
    isl: int
    osl: int
    ttft_ms: float
    tpot_ms: float
    why: str
    kind: str = "dense short"  # dense short | dense long | MLA MoE | MoE | P/D
    unseen: bool = False  # never used to tune the optimizer (issue 27's checks, and new ones)

    @property
    def shipped(self) -> frozenset[opt.Feature]:
        """The references' own space for this model. For DeepSeek-V3 their default sweeps FP8
        KV beside the FP8 checkpoint (AIConfigurator's pick is FP8 KV), so Plinth may choose the
        KV dtype too; its weights are FP8 already, so no other format is added."""
        if self.model in MLA_MODELS:
            return AS_SHIPPED | {"quantization"}
        return AS_SHIPPED

    def request(self, features: frozenset[opt.Feature]) -> opt.OptimizeRequest:
        return opt.OptimizeRequest(
            model=self.model,
            gpus=(self.gpu,),
            traffic=opt.Traffic(self.isl, self.osl, rate_rps=1.0),
            # AIConfigurator's TPOT is a mean over the answer and it has no p90 ITL bound.
            slo=opt.Slo(self.ttft_ms / 1000, math.inf, tpot_mean_s=self.tpot_ms / 1000),
            limits=opt.Limits(max_gpus=self.gpus),
            features=features,
            objective="throughput",
        )

    @property
    def label(self) -> str:
        return (
            f"{self.model} {self.gpu} x{self.gpus} ISL {self.isl} OSL {self.osl} "
            f"TTFT {self.ttft_ms:.0f} ms TPOT {self.tpot_ms:.0f} ms"
        )


# fmt: off
CASES = [
    Case("llama-3.1-8b", "H100-SXM", 8, 1024, 256, 1000, 50, "chat, loose TPOT"),
    Case("llama-3.1-8b", "H200", 8, 8000, 200, 1000, 15, "long prompts, tight TPOT", "dense long"),
    Case("llama-3.1-70b", "H200", 8, 1024, 512, 2000, 50, "chat on a big dense model"),
    Case("llama-3.1-70b", "H100-SXM", 8, 4000, 500, 1500, 25, "RAG-sized prompts, tight TPOT",
         "dense long"),
    Case("qwen3-32b", "H100-SXM", 8, 2048, 512, 1000, 40, "mid-size dense"),
    Case("qwen3-32b", "H200", 8, 6000, 300, 1200, 20, "long prompts, tight TPOT: P/D", "P/D"),
    Case("qwen3-235b-a22b", "H200", 16, 1024, 256, 2000, 50, "MoE, two nodes", "MoE"),
    # Unseen: cases the optimizer was never tuned on (issue 27's independent checks, and more of
    # each kind); qwen3-8b, Llama-3.1-70B on B200 and DeepSeek-V3 on B200 are also held out of
    # bench/calibration.py's fit.
    Case("llama-3.1-8b", "H200", 8, 1024, 512, 1000, 30, "chat on H200", unseen=True),
    Case("llama-3.1-8b", "B200", 8, 8000, 500, 1500, 20, "long prompts on B200", "dense long",
         unseen=True),
    Case("qwen3-8b", "B200", 8, 2048, 256, 1000, 25, "unseen model on B200", unseen=True),
    Case("llama-3.1-70b", "B200", 8, 16000, 500, 3000, 40, "16k prompts, 70B on B200",
         "dense long", unseen=True),
    Case("deepseek-v3", "H200", 8, 1024, 256, 2000, 50, "MLA MoE chat on one node", "MLA MoE",
         unseen=True),
    Case("deepseek-v3", "H200", 16, 4000, 500, 3000, 40, "MLA MoE, RAG prompts, two nodes",
         "MLA MoE", unseen=True),
    Case("qwen3-8b", "H200", 8, 12000, 150, 600, 10, "P/D-favoured: long prompts, tight both",
         "P/D", unseen=True),
]
# fmt: on


# ---- pricing each pick -----------------------------------------------------------------------
@dataclass(frozen=True)
class Priced:
    tok_s_gpu: float | None
    mark: str = ""  # "*": priced without a part AIConfigurator has no data for
    note: str = ""

    def show(self) -> str:
        if self.tok_s_gpu is None:
            return "n/a"
        return f"{self.tok_s_gpu:.0f}{self.mark}"


def price_under(tool: Tool, case: Case, pick: Pick) -> Priced:
    if pick.speculator != "none":
        return Priced(None, note=f"{tool.name} has no {pick.speculator} for SGLang")
    answer: dict[str, Any] = {}
    kv = pick.layout.kv_dtype
    for kv_as_shipped in (False, True):
        if kv_as_shipped and kv == "auto":
            break
        if not kv_as_shipped and kv not in ("auto", *AIC_KV):
            continue  # a KV format the references do not name at all (NVFP4)
        notes = [f"{kv} KV priced as shipped (no SGLang data for it)"] if kv_as_shipped else []
        mark = "*" if kv_as_shipped else ""
        if pick.layout.moe_a2a == "deepep" and case.model in MLA_MODELS and kv != "fp8_e4m3":
            notes.append(f"DeepEP with {kv} KV priced on AIC's DeepEP data (FP8 KV only)")
            mark = "*"
        # Its own sweep pinned to the pick first; a P/D pick its sweep finds nothing for (some
        # mixed-TP splits) is priced at Plinth's exact pools instead.
        jobs = [{"op": "pin", "config": pinned_config(case, pick, kv_as_shipped)}]
        if pick.layout.prefill_tp is not None:
            jobs.append(disagg_job(case, pick, kv_as_shipped))
        for number, job in enumerate(jobs):
            answer = ask(tool, job)
            rows = answer.get("picks") or {}
            if "pin" in rows:
                if number:
                    notes.append("priced at Plinth's exact pools (AIC's pinned sweep: nothing)")
                return Priced(float(rows["pin"]["tokens/s/gpu"]), mark, "; ".join(notes))
    return Priced(None, note=str(answer.get("error", "nothing feasible"))[:80])


def price_under_plinth(case: Case, pick: Pick) -> Priced:
    prediction = opt.predict_layout(case.request(case.shipped), pick.layout)
    if prediction is None:
        return Priced(None, note="does not fit in Plinth's memory model")
    if not prediction.meets_slo:
        return Priced(0.0, note="misses the SLOs even unloaded in Plinth's model")
    return Priced(prediction.tokens_per_s_per_gpu)


# ---- the run -----------------------------------------------------------------------------------
@dataclass
class RefPick:
    """One reference's own pick and what each model makes of it."""

    pick: Pick | None = None
    mode: str = ""
    seconds: float = 0.0
    priced: dict[str, Priced] = field(default_factory=dict)  # model name -> its figure
    note: str = ""


@dataclass
class Row:
    case: Case
    refs: dict[str, RefPick] = field(default_factory=dict)
    # search space -> (pick, seconds, figure by model name: Plinth's and each reference's)
    plinth: dict[str, tuple[Pick, float, dict[str, Priced]]] = field(default_factory=dict)


PLINTH = "Plinth"


def run_case(case: Case, tools: list[Tool]) -> Row:
    row = Row(case)
    for space, features in (("as shipped", case.shipped), ("full", frozenset(opt.WATERFALL))):
        start = time.perf_counter()
        result = opt.optimize(case.request(features))
        seconds = time.perf_counter() - start
        if result.best is None:
            continue
        pick = plinth_pick(result.best)
        priced = {PLINTH: Priced(result.best.prediction.tokens_per_s_per_gpu)}
        for tool in tools:
            priced[tool.name] = price_under(tool, case, pick)
        row.plinth[space] = (pick, seconds, priced)
    for tool in tools:
        row.refs[tool.name] = reference_pick(tool, case, tools)
    return row


def reference_pick(tool: Tool, case: Case, tools: list[Tool]) -> RefPick:
    """The reference's own search, its pick priced by itself, by Plinth and by the others."""
    answer = ask(tool, {
        "op": "search", "model": MODELS[case.model], "system": AIC_SYSTEMS[case.gpu],
        "gpus": case.gpus, "isl": case.isl, "osl": case.osl, "ttft": case.ttft_ms,
        "tpot": case.tpot_ms,
    })  # fmt: skip
    seconds = float(answer.get("import_s", 0)) + float(answer.get("search_s", 0))
    picks = answer.get("picks") or {}
    mode = answer.get("chosen")
    if mode not in picks:
        return RefPick(seconds=seconds, note=str(answer.get("error", "no pick"))[:80])
    pick = aic_pick(case, str(mode), picks[mode])
    priced = {tool.name: Priced(float(picks[mode]["tokens/s/gpu"]))}
    priced[PLINTH] = price_under_plinth(case, pick)
    for other in tools:
        if other.name != tool.name:
            priced[other.name] = price_under(other, case, pick)
    return RefPick(pick, str(mode), seconds, priced)


def print_row(index: int, row: Row, names: list[str]) -> dict[str, float]:
    """Prints one case; returns, per reference, Plinth's like-for-like pick over the
    reference's own pick, both priced by that reference's model."""
    case = row.case
    seen = "unseen" if case.unseen else "calibrated"
    print(f"\n[{index}] {case.label}  ({case.kind}, {seen}: {case.why})")
    columns = [PLINTH, *names]
    header = "".join(f"{name + ' t/s/GPU':>16}" for name in columns)
    print(f"    {'tool / search space':<22}{'pick':<50}{header}{'search s':>10}")
    for name in names:
        ref = row.refs.get(name)
        if ref is None or ref.pick is None:
            print(f"    {name:<22}({ref.note if ref else 'not asked'})")
            continue
        cells = "".join(f"{ref.priced.get(c, Priced(None)).show():>16}" for c in columns)
        print(f"    {name:<22}{ref.pick.describe():<50}{cells}{ref.seconds:>10.1f}")
        for model, priced in ref.priced.items():
            if priced.note:
                print(f"    {'':<22}  {model}: {priced.note}")
    for space, (pick, seconds, priced) in row.plinth.items():
        cells = "".join(f"{priced.get(c, Priced(None)).show():>16}" for c in columns)
        print(f"    {'Plinth (' + space + ')':<22}{pick.describe():<50}{cells}{seconds:>10.2f}")
        for model, figure in priced.items():
            if figure.note:
                print(f"    {'':<22}  {model}: {figure.note}")
    if not row.plinth:
        print("    Plinth: nothing meets the SLOs")
    ratios: dict[str, float] = {}
    shipped = row.plinth.get("as shipped")
    for name in names:
        ref = row.refs.get(name)
        own = ref.priced.get(name) if ref else None
        mine = shipped[2].get(name) if shipped else None
        if own and own.tok_s_gpu and mine and mine.tok_s_gpu is not None:
            ratios[name] = mine.tok_s_gpu / own.tok_s_gpu
            met = ratios[name] >= RATIO_TARGET
            print(f"    ratio Plinth/{name} under {name}'s model: {ratios[name]:.2f} "
                  f"(target {RATIO_TARGET}: {'met' if met else 'NOT met'})")  # fmt: skip
    if shipped:
        met = shipped[1] < PLINTH_SECONDS_TARGET
        print(f"    Plinth search {shipped[1]:.2f} s (target {PLINTH_SECONDS_TARGET:.0f} s: "
              f"{'met' if met else 'NOT met'})")  # fmt: skip
    return ratios


# ---- what only Plinth covers -------------------------------------------------------------------
CUSTOM = Architecture(
    architecture="MyLlamaForCausalLM",  # a class name SGLang and AIConfigurator do not ship
    num_layers=40, hidden_size=5120, num_attention_heads=40, num_kv_heads=8, head_dim=128,
    vocab_size=128256, params_b=13.0, max_context=32768,
)  # fmt: skip
PLINTH_ONLY: list[tuple[str, opt.OptimizeRequest]] = [
    (
        "EAGLE3 draft, Llama-3.1-8B on H100, interactive (TPOT 10 ms)",
        opt.OptimizeRequest(
            model="llama-3.1-8b",
            gpus=("H100-SXM",),
            traffic=opt.Traffic(2048, 512, 1.0),
            slo=opt.Slo(1.0, 0.010),
            limits=opt.Limits(max_gpus=8),
            objective="throughput",
        ),
    ),
    (
        "custom architecture (13B, not in any catalogue) on H100",
        opt.OptimizeRequest(
            model="acme/my-13b",
            architecture=CUSTOM,
            gpus=("H100-SXM",),
            traffic=opt.Traffic(2048, 256, 1.0),
            slo=opt.Slo(1.0, 0.04),
            limits=opt.Limits(max_gpus=8),
            objective="throughput",
        ),
    ),
    (
        "FP4 KV cache, Llama-3.1-70B on B200, 16k-token answers",
        opt.OptimizeRequest(
            model="llama-3.1-70b",
            gpus=("B200",),
            traffic=opt.Traffic(4000, 16000, 1.0),
            slo=opt.Slo(10.0, 0.05),
            limits=opt.Limits(max_gpus=8),
            objective="throughput",
            features=frozenset({"quantization", "disaggregation"}),
        ),
    ),
]


def print_plinth_only() -> None:
    print("\n== cases only Plinth covers (AIConfigurator: no EAGLE/EAGLE3 for SGLang, no custom "
          "architectures, no FP4 KV cache) ==")  # fmt: skip
    print(f"{'case':<64}{'pick':<52}{'t/s/GPU':>9}{'search s':>10}")
    for name, request in PLINTH_ONLY:
        start = time.perf_counter()
        result = opt.optimize(request)
        seconds = time.perf_counter() - start
        best = result.best
        pick = best.label if best else "(nothing meets the SLOs)"
        figure = f"{best.prediction.tokens_per_s_per_gpu:.0f}" if best else "-"
        print(f"{name:<64}{pick:<52}{figure:>9}{seconds:>10.2f}")
        if best is not None:
            nearest = _without(request, best)
            if nearest:
                print(f"{'':<64}  {nearest}")


def _without(request: opt.OptimizeRequest, best: opt.Candidate) -> str:
    """The nearest Plinth figure without what makes the case Plinth-only, for scale."""
    s = best.spec
    if s.quantization.kv_cache_dtype == "nvfp4" and not s.speculator.enabled:
        pick = plinth_pick(best)
        priced = opt.predict_layout(request, replace(pick.layout, kv_dtype="fp8_e4m3"))
        figure = f"{priced.tokens_per_s_per_gpu:.0f}" if priced and priced.meets_slo else "-"
        return f"same layout, FP8 KV: {figure} t/s/GPU"
    if not s.speculator.enabled:
        return ""
    other = opt.optimize(replace(request, features=request.features - {"speculator"}))
    if other.best is None:
        return "no speculation: nothing meets the SLOs"
    tok_s = other.best.prediction.tokens_per_s_per_gpu
    return f"no speculation: {other.best.label} {tok_s:.0f} t/s/GPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", help="comma-separated case numbers (1-based); default all")
    parser.add_argument("--no-aic", action="store_true", help="Plinth's side only")
    parser.add_argument("--only-aic", action="store_true", help="AIConfigurator alone")
    args = parser.parse_args()
    chosen = [int(n) for n in args.cases.split(",")] if args.cases else range(1, len(CASES) + 1)
    references = [] if args.no_aic else [AIC] if args.only_aic else list(REFERENCES)
    tools = [Tool(ref, ensure(ref)) for ref in references]
    names = [tool.name for tool in tools]
    print(f"== Plinth optimizer vs {', '.join(names) or 'no reference'} (cli default, sglang) ==")
    print("tokens/s/GPU of each pick under each model, each at the most it carries within the")
    print("SLOs; '*' = priced without a part the reference has no data for; search s = wall time")
    print("of one search (a reference: a fresh process, as its CLI runs)")
    results: list[tuple[Case, dict[str, float]]] = []
    for index in chosen:
        row = run_case(CASES[index - 1], tools)
        results.append((row.case, print_row(index, row, names)))
    print_plinth_only()
    if tools:
        sys.exit(0 if print_verdict(results, names) else 1)


def print_verdict(results: list[tuple[Case, dict[str, float]]], names: list[str]) -> bool:
    """Per kind and reference: the ratios, and whether the unseen dense, long-context and MLA
    MoE cases reach the target (issue 27's done-when)."""
    print("\n== Plinth's pick / the reference's own pick, each by the reference's model ==")
    print(f"{'case':<64}{'kind':<13}{'set':<11}" + "".join(f"{n:>10}" for n in names))
    ok = True
    for case, ratios in results:
        seen = "unseen" if case.unseen else "calibrated"
        cells = "".join(f"{ratios[n]:>10.2f}" if n in ratios else f"{'-':>10}" for n in names)
        print(f"{case.label[:63]:<64}{case.kind:<13}{seen:<11}{cells}")
        if case.unseen and case.kind in ("dense short", "dense long", "MLA MoE"):
            ok = ok and all(ratios.get(n, 0.0) >= RATIO_TARGET for n in names)
    print(f"unseen dense, long-context and MLA MoE cases at >= {RATIO_TARGET}x under every "
          f"reference: {'met' if ok else 'NOT met'}")  # fmt: skip
    return ok


if __name__ == "__main__":
    main()
