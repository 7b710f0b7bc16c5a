"""What a quantization job prints: one JSON object per line on stdout, nothing else there.

The tool writes these with ``emit``-style ``model_dump_json()``; the platform reads each line with
``parse_event`` and records progress (the phase), the per-layer sensitivity, each candidate's
measured KL and checkpoint, then ``done``, or ``error`` (and the tool exits non-zero).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from runtime.quantize.recipe import Recipe

Phase = Literal["loading", "sensitivity", "calibrating", "quantizing", "evaluating", "exporting"]


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PhaseEvent(_Event):
    event: Literal["phase"] = "phase"
    phase: Phase
    candidate: str | None = None  # the candidate being made, None for the job as a whole


class LayerSensitivity(BaseModel):
    """One decoder block quantized alone: KL(original || that) over the evaluation set."""

    model_config = ConfigDict(extra="forbid")

    name: str  # the block's module name, e.g. model.layers.3
    kl: float = Field(ge=0)
    params: int = Field(default=0, ge=0)  # weights of its Linear modules


class SensitivityEvent(_Event):
    event: Literal["sensitivity"] = "sensitivity"
    layers: list[LayerSensitivity]


class ToolVersion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    version: str


class CandidateEvent(_Event):
    """One candidate made and measured against the original."""

    event: Literal["candidate"] = "candidate"
    name: str
    recipe: Recipe
    mean_kl: float = Field(ge=0)  # nats per token, KL(original || candidate)
    p99_kl: float | None = Field(default=None, ge=0)
    top1: float = Field(ge=0, le=1)  # top-1 agreement with the original
    quantized_fraction: float = Field(ge=0, le=1)  # share of the decoder's Linear weights
    # That share by format (a recipe may quantize some modules at another format); sums to
    # quantized_fraction. What ``price_candidate`` prices.
    format_shares: dict[str, float] = Field(default_factory=dict)
    bits_per_weight: float = Field(gt=0)  # the checkpoint's bytes x 8 over the model's weights
    checkpoint: str  # the folder of the exported HF checkpoint
    quantization: str  # SGLang's --quantization value for it
    tool: ToolVersion
    # sha256 of the calibration texts offered (JSON list, after sampling); formats that need no
    # calibration (fp8, w8a8_int8: dynamic activations, weights rounded per channel) ignore them.
    calibration_sha256: str


class DoneEvent(_Event):
    event: Literal["done"] = "done"


class ErrorEvent(_Event):
    event: Literal["error"] = "error"
    message: str


Event = Annotated[
    PhaseEvent | SensitivityEvent | CandidateEvent | DoneEvent | ErrorEvent,
    Field(discriminator="event"),
]
_EVENTS: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(line: str) -> Event:
    """One stdout line of the tool as its event (a ValidationError for anything else)."""
    return _EVENTS.validate_json(line)
