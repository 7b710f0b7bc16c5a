"""One job: load, measure per-layer sensitivity, make and measure each candidate, export.

Every candidate starts from a fresh copy of the source model (quantization is in place). KL and
top-1 agreement come from ``runtime.quality`` (the same math as the KL gate of deployed
revisions): KL(original || candidate) per token over the top ``model.TOP_K`` of each position.
"""

from __future__ import annotations

import hashlib
import json
import sys
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ValidationError

from runtime.catalog.quantization import tool_format
from runtime.quality import QualityReport, TopLogprobs, score_prompt
from runtime.quantize.events import (
    CandidateEvent,
    DoneEvent,
    ErrorEvent,
    LayerSensitivity,
    PhaseEvent,
    SensitivityEvent,
    ToolVersion,
)
from runtime.quantize.propose import block_pattern, propose
from runtime.quantize.recipe import Job, Recipe

Baseline = list[list[TopLogprobs]]


class Run:
    """A job's shared state: the texts, ids and the original model's distributions."""

    def __init__(self, job: Job, events: IO[str]) -> None:
        self.job, self.events = job, events
        self.emit(PhaseEvent(phase="loading"))
        from plinth_quantize import model as m  # torch and the library: after the job checks

        self.m = m
        self.tokenizer = self.m.load_tokenizer(job.source_path)
        original = self.m.load_model(job.source_path)
        vocab = original.config.vocab_size
        cal, ev = job.calibration, job.eval
        self.calibration_texts = self.m.read_texts(cal.path, cal.samples, offset=0)
        self.calibration = self.m.encode(
            self.calibration_texts, self.tokenizer, vocab, cal.max_seq_len
        )
        self.eval_texts = self.m.read_texts(ev.path, ev.samples, offset=1)
        self.prompts = self.m.encode(self.eval_texts, self.tokenizer, vocab, cal.max_seq_len)
        self.baseline = self.m.top_logprobs(original, self.prompts)
        self.linears = self.m.linear_names(original)
        self.blocks = self.m.block_names(original)
        self.params = self.m.param_count(original)
        digest = hashlib.sha256(json.dumps(self.calibration_texts).encode()).hexdigest()
        self.calibration_sha256 = digest

    def emit(self, event: BaseModel) -> None:
        self.events.write(event.model_dump_json() + "\n")
        self.events.flush()

    def measure(self, recipe: Recipe, name: str | None) -> tuple[object, QualityReport]:
        """A fresh copy of the source quantized by `recipe`, and its report against the original."""
        model = self.m.load_model(self.job.source_path)
        formats = self.m.assignment(model, recipe, self.job.format)
        calibrates = any(tool_format(f).calibrated for f in formats.values() if f)  # type: ignore[union-attr]
        self.emit(PhaseEvent(phase="calibrating" if calibrates else "quantizing", candidate=name))
        self.m.quantize(model, formats, self.calibration)
        self.emit(PhaseEvent(phase="evaluating", candidate=name))
        scored = self.m.top_logprobs(model, self.prompts)
        prompts = tuple(
            score_prompt(i, text, base, cand)
            for i, (text, base, cand) in enumerate(
                zip(self.eval_texts, self.baseline, scored, strict=True)
            )
        )
        return model, QualityReport(prompts=prompts)

    def sensitivity(self) -> list[LayerSensitivity]:
        """Each block quantized alone (every other block kept), its KL against the original."""
        self.emit(PhaseEvent(phase="sensitivity"))
        layers = []
        for block in self.blocks:
            others = [block_pattern(b) for b in self.blocks if b != block]
            recipe = Recipe(name="sensitivity", keep_bf16=others)
            _, report = self.measure(recipe, None)
            params = sum(n for name, n in self.linears.items() if name.startswith(block + "."))
            layers.append(LayerSensitivity(name=block, kl=report.mean_kl, params=params))
        self.emit(SensitivityEvent(layers=layers))
        return layers

    def candidate(self, recipe: Recipe) -> None:
        quantized, report = self.measure(recipe, recipe.name)
        self.emit(PhaseEvent(phase="exporting", candidate=recipe.name))
        folder = Path(self.job.output_dir) / recipe.name
        self.m.export(quantized, self.tokenizer, folder)
        form = tool_format(self.job.format)
        assert form is not None
        self.emit(
            CandidateEvent(
                name=recipe.name,
                recipe=recipe,
                mean_kl=report.mean_kl,
                p99_kl=report.p99_kl,
                top1=report.top1_agreement,
                **self.shares(recipe),
                bits_per_weight=8 * self.m.checkpoint_bytes(folder) / self.params,
                checkpoint=str(folder.resolve()),
                quantization=form.serve_as,
                tool=ToolVersion(name="llmcompressor", version=version("llmcompressor")),
                calibration_sha256=self.calibration_sha256,
            )
        )

    def shares(self, recipe: Recipe) -> dict[str, object]:
        """The share of the decoder's Linear weights (lm_head apart: the performance model prices
        it with the embeddings, in BF16) quantized, in all and by format."""
        body = {name: n for name, n in self.linears.items() if name.startswith(tuple(self.blocks))}
        total = sum(body.values()) or 1
        by_format: dict[str, float] = {}
        for name, count in body.items():
            fmt = recipe.format_of(name, self.job.format)
            if fmt is not None:
                by_format[fmt] = by_format.get(fmt, 0.0) + count / total
        return {"quantized_fraction": min(1.0, sum(by_format.values())), "format_shares": by_format}


def run_job(path: str, events: IO[str]) -> int:
    """Run the job in `path`, writing its events to `events`; the exit status."""
    try:
        job = Job.model_validate_json(Path(path).read_text())
    except (OSError, ValidationError) as exc:
        events.write(ErrorEvent(message=f"bad job file {path}: {exc}").model_dump_json() + "\n")
        return 2
    run = None
    try:
        run = Run(job, events)
        candidates = list(job.candidates)
        if job.propose:
            taken = {c.name for c in candidates}
            proposed = propose(run.sensitivity(), job.format)
            candidates += [r for r in proposed if r.name not in taken]
        for recipe in candidates:
            run.candidate(recipe)
    except Exception as exc:  # the platform records the message; the trace goes to the log
        traceback.print_exc(file=sys.stderr)
        events.write(ErrorEvent(message=f"{type(exc).__name__}: {exc}").model_dump_json() + "\n")
        return 1
    run.emit(DoneEvent())
    return 0
