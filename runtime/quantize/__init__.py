"""Quantization jobs without torch: recipes, the job file, the tool's events, proposals, pricing.

The tool itself (llmcompressor, in a virtualenv of its own: ``scripts/quantize_env.sh``) lives in
``tools/quantize/plinth_quantize`` and imports this package for its schema and proposals; the
platform imports it to write jobs, read events and price candidates.

The contract (stable; a change is recorded in the brief's q-contract-changes.md):

- ``Job`` (JOB.json): ``source_path``, ``format`` (a ``tool_formats`` name of the quantization
  catalogue: fp8, nvfp4, w4a16, w8a8_int8), ``candidates: [Recipe]`` and/or ``propose: true``,
  ``calibration {path|null, samples, max_seq_len}``, ``eval {path|null, samples}``,
  ``output_dir`` (each candidate's checkpoint goes to ``output_dir/<name>``).
- ``Recipe``: ``name``, ``keep_bf16: [glob]``, ``formats: {glob: format}``; lm_head is kept
  unless a ``formats`` glob names it.
- Events (``runtime.quantize.events``, ``parse_event(line)``): phase, sensitivity, candidate,
  done, error; see that module.
- ``propose(sensitivity, fmt, *, quantize_lm_head=False) -> list[Recipe]``: the search's
  candidates from the sensitivity event's layers (``runtime.quantize.propose``).
- ``price_candidate(spec, fmt, format_shares, *, traffic=None, slo=None) -> CandidatePrice``:
  throughput per GPU at the SLO of `spec`'s model on its GPU and TP with the candidate's weight
  mix (``format_shares`` from the candidate event, or its ``quantized_fraction``)
  (``runtime.quantize.pricing``).
"""

from __future__ import annotations

from runtime.quantize.events import (
    CandidateEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    LayerSensitivity,
    PhaseEvent,
    SensitivityEvent,
    parse_event,
)
from runtime.quantize.pricing import CandidatePrice, price_candidate
from runtime.quantize.propose import propose
from runtime.quantize.recipe import Calibration, Evaluation, Job, Recipe

__all__ = [
    "Calibration",
    "CandidateEvent",
    "CandidatePrice",
    "DoneEvent",
    "ErrorEvent",
    "Evaluation",
    "Event",
    "Job",
    "LayerSensitivity",
    "PhaseEvent",
    "Recipe",
    "SensitivityEvent",
    "parse_event",
    "price_candidate",
    "propose",
]
