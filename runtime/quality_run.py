"""Run the KL quality gate between two live revisions. Framework-free (httpx, no Django).

1. Each prompt goes through the **baseline** with SGLang's native ``/generate`` (greedy). The same
   call asks for input logprobs from position 0, whose token ids are the prompt's ids as the
   engine tokenized them (the native API returns no other way to see them).
2. ``prompt ids + the baseline's output ids`` are sent to **both** revisions with
   ``max_new_tokens=0``, ``return_logprob``, ``logprob_start_len = len(prompt) - 1`` and
   ``top_logprobs_num``: teacher forcing, so entry ``i + 1`` of ``input_top_logprobs`` is each
   engine's distribution over output token ``i`` after the same prefix (entry 0 is SGLang's
   padding None).
3. ``runtime.quality`` turns the two sides into a report and a verdict.

Both URLs may be engines or smg routers (both serve ``/generate``); both must share a tokenizer.
Intended wiring (not built yet): a Celery task of the gate model calls ``run_quality`` with the
two revisions' router URLs and stores ``report.as_dict()`` on the gate; a canary's promotion
checks its verdict.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from runtime.client import EngineClient, RuntimeUnavailable
from runtime.quality import (
    DEFAULT_MAX_MEAN_KL,
    DEFAULT_MIN_TOP1_AGREEMENT,
    GateThresholds,
    PromptScore,
    QualityReport,
    TopLogprobs,
    score_prompt,
)

DEFAULT_MAX_NEW_TOKENS = 64
DEFAULT_TOP_K = 20  # SGLang's OpenAI API caps top_logprobs at 20; the native API allows more
DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT_S = 120.0


class QualityRunError(Exception):
    """The prompt set cannot be read, or an engine answered in an unexpected shape."""


def builtin_prompts() -> list[str]:
    """The small varied prompt set shipped in ``runtime/catalog/quality_prompts.json``."""
    text = resources.files("runtime.catalog").joinpath("quality_prompts.json").read_text()
    return [str(p) for p in json.loads(text)["prompts"]]


def load_prompts(path: Path) -> list[str]:
    """A user's JSONL: one object per line with a ``prompt`` (or ``text``) string."""
    prompts = []
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise QualityRunError(f"cannot read {path}: {exc.strerror or exc}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise QualityRunError(f"{path}:{number}: not JSON") from exc
        prompt = row.get("prompt", row.get("text")) if isinstance(row, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise QualityRunError(f'{path}:{number}: needs a non-empty "prompt" string')
        prompts.append(prompt)
    if not prompts:
        raise QualityRunError(f"{path} holds no prompts")
    return prompts


@dataclass(frozen=True)
class QualityRun:
    """What to compare and how; ``thresholds`` are the gate the report is judged by."""

    baseline_url: str
    candidate_url: str
    prompts: Sequence[str]
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    top_k: int = DEFAULT_TOP_K
    thresholds: GateThresholds = field(default_factory=GateThresholds)
    concurrency: int = DEFAULT_CONCURRENCY
    api_key: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S


def _meta(response: dict[str, Any], key: str) -> list[Any]:
    value = response.get("meta_info", {}).get(key)
    if not isinstance(value, list):
        raise QualityRunError(f"the engine's meta_info has no {key} list")
    return value


def _baseline_answer(
    client: EngineClient, prompt: str, max_new_tokens: int
) -> tuple[list[int], int]:
    """Prompt ids + greedy output ids from the baseline, and how many of them are the prompt."""
    response = client.generate(
        {
            "text": prompt,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0.0},
            "return_logprob": True,
            "logprob_start_len": 0,
        }
    )
    prompt_ids = [int(row[1]) for row in _meta(response, "input_token_logprobs")]
    output_ids = response.get("output_ids")
    if not prompt_ids or not isinstance(output_ids, list):
        raise QualityRunError("the baseline returned no prompt or output token ids")
    return prompt_ids + [int(i) for i in output_ids], len(prompt_ids)


def _score(client: EngineClient, ids: list[int], prompt_len: int, top_k: int) -> list[TopLogprobs]:
    """One side's top-k distribution over each output token of ``ids`` (teacher forced)."""
    response = client.generate(
        {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
            "return_logprob": True,
            "logprob_start_len": prompt_len - 1,
            "top_logprobs_num": top_k,
        }
    )
    tops = _meta(response, "input_top_logprobs")[1:]  # entry 0 is SGLang's padding None
    expected = len(ids) - prompt_len
    if len(tops) != expected or any(not isinstance(top, list) or not top for top in tops):
        raise QualityRunError(
            f"expected {expected} input top-logprob lists, got {len(tops)} (is the engine an "
            "SGLang with logprob_start_len support?)"
        )
    return [{int(row[1]): float(row[0]) for row in top} for top in tops]


def run_quality(
    run: QualityRun, *, progress: Callable[[int, int], None] | None = None
) -> QualityReport:
    """Score every prompt under both revisions; raises ``RuntimeUnavailable`` or
    ``QualityRunError`` when an engine cannot be used."""
    if not run.prompts:
        raise QualityRunError("no prompts to score")
    done = 0

    def one(index: int) -> PromptScore:
        nonlocal done
        prompt = run.prompts[index]
        ids, prompt_len = _baseline_answer(baseline, prompt, run.max_new_tokens)
        base = _score(baseline, ids, prompt_len, run.top_k)
        cand = _score(candidate, ids, prompt_len, run.top_k)
        score = score_prompt(index, prompt, base, cand)
        done += 1
        if progress:
            progress(done, len(run.prompts))
        return score

    with (
        EngineClient(run.baseline_url, timeout=run.timeout_s, api_key=run.api_key) as baseline,
        EngineClient(run.candidate_url, timeout=run.timeout_s, api_key=run.api_key) as candidate,
        ThreadPoolExecutor(max_workers=max(1, run.concurrency)) as pool,
    ):
        scores = list(pool.map(one, range(len(run.prompts))))
    return QualityReport(prompts=tuple(scores), thresholds=run.thresholds)


def format_report(report: QualityReport) -> str:
    """The report for a terminal: headline figures, the worst prompts, then PASS or FAIL."""
    verdict = report.verdict()
    lines = [
        f"{len(report.prompts)} prompt(s), {report.tokens} token(s) scored",
        f"mean KL {report.mean_kl:.5f} nats (max {report.thresholds.max_mean_kl:g}), "
        f"p99 {report.p99_kl:.5f}; per-prompt mean KL p99 {report.prompt_mean_kl_p99:.5f}",
        f"top-1 agreement {report.top1_agreement:.4f} "
        f"(min {report.thresholds.min_top1_agreement:g})",
        "worst prompts:",
    ]
    for score in report.worst():
        text = score.prompt if len(score.prompt) <= 70 else score.prompt[:67] + "..."
        lines.append(
            f"  #{score.index} mean KL {score.mean_kl:.5f}, top-1 {score.top1_agreement:.3f}: "
            f"{text}"
        )
    lines.append("PASS" if verdict.passed else "FAIL: " + "; ".join(verdict.reasons))
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """``python -m runtime quality``: exit 0 when the gate passes, 1 when it fails, 2 on errors."""
    parser = argparse.ArgumentParser(
        prog="python -m runtime quality",
        description="KL(baseline || candidate) and top-1 agreement on the baseline's answers.",
    )
    parser.add_argument("--baseline", required=True, help="baseline engine or router URL")
    parser.add_argument("--candidate", required=True, help="candidate engine or router URL")
    parser.add_argument("--prompts", type=Path, help='JSONL, one {"prompt": ...} per line')
    parser.add_argument("--max-new-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS)
    parser.add_argument("--top-k", type=int, default=DEFAULT_TOP_K)
    parser.add_argument("--max-mean-kl", type=float, default=DEFAULT_MAX_MEAN_KL)
    parser.add_argument("--min-top1-agreement", type=float, default=DEFAULT_MIN_TOP1_AGREEMENT)
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--api-key", default="", help="bearer key of both URLs, if any")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(list(argv))
    try:
        run = QualityRun(
            baseline_url=args.baseline,
            candidate_url=args.candidate,
            prompts=load_prompts(args.prompts) if args.prompts else builtin_prompts(),
            max_new_tokens=args.max_new_tokens,
            top_k=args.top_k,
            thresholds=GateThresholds(args.max_mean_kl, args.min_top1_agreement),
            concurrency=args.concurrency,
            api_key=args.api_key,
        )
        report = run_quality(run)
    except (QualityRunError, RuntimeUnavailable, ValueError) as exc:
        print(f"quality: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_dict(), indent=2) if args.json else format_report(report))
    return 0 if report.verdict().passed else 1
