"""What a candidate recipe buys: throughput per GPU at the SLO, from the performance model.

``price_candidate`` prices one engine of the spec's GPU and TP serving the candidate's checkpoint,
loaded to the most requests/s it carries within the SLO (as a ``throughput`` search of
``runtime.optimize`` does). The weights are the candidate's mix: each format's share of the
decoder's Linear weights at that format's bytes (the quantization catalogue's row it is priced
as), the rest in BF16, the embeddings and LM head in BF16
(``runtime.memory.mixed_bytes_per_param``).
The GEMMs run on the job format's path (FP8 tensor cores for FP8 where the GPU has them, ...):
kept BF16 blocks running slower GEMMs is not modelled, so a recipe keeping more is priced a
little optimistically; its extra weight bytes, which decode streams every step, are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.catalog import get_gpu
from runtime.catalog.quantization import tool_format
from runtime.memory import GIB, mixed_bytes_per_param
from runtime.optimize.queueing import EngineLoad
from runtime.optimize.search import predict_figures
from runtime.optimize.shapes import ShapeKnobs, build_shape, default_ep, shape_context
from runtime.optimize.types import OptimizeRequest, Slo, Traffic, resolve_model
from runtime.spec import RuntimeSpec


@dataclass(frozen=True)
class CandidatePrice:
    """One candidate's place on the frontier's throughput axis."""

    tokens_per_s_per_gpu: float  # output tokens/s per GPU at the SLO (0 when it does not fit)
    capacity_rps: float  # requests/s one engine carries within the SLO
    meets_slo: bool
    fits: bool  # False: the weights and KV pool do not fit the GPU at this TP
    bytes_per_weight: float  # of the decoder body, the mix priced
    weight_gib_per_gpu: float


def priced_shares(fmt: str, format_shares: Mapping[str, float] | float) -> dict[str, float]:
    """The candidate's shares keyed by the catalogue weight rows they are priced as."""
    shares = {fmt: format_shares} if isinstance(format_shares, int | float) else format_shares
    priced: dict[str, float] = {}
    for name, share in shares.items():
        form = tool_format(name)
        if form is None:
            raise ValueError(f"unknown format {name!r}")
        priced[form.priced_as] = priced.get(form.priced_as, 0.0) + float(share)
    return priced


def price_candidate(
    spec: RuntimeSpec,
    fmt: str,
    format_shares: Mapping[str, float] | float,
    *,
    traffic: Traffic | None = None,
    slo: Slo | None = None,
) -> CandidatePrice:
    """Price a candidate of target format `fmt` for `spec`'s model, GPU, TP and KV cache.

    `format_shares`: the candidate event's ``format_shares`` (share of the decoder's Linear
    weights by format), or its ``quantized_fraction`` alone for a single-format recipe. The
    spec's model must be catalogued or carry an inline architecture (else an OptimizeError, a
    ValueError, names it); the source model's architecture is the quantized one's.
    """
    form = tool_format(fmt)
    if form is None:
        raise ValueError(f"unknown format {fmt!r}")
    body = mixed_bytes_per_param(priced_shares(fmt, format_shares))
    traffic, slo = traffic or Traffic(), slo or Slo()
    request = OptimizeRequest(
        model=spec.model.source,
        traffic=traffic,
        slo=slo,
        architecture=spec.model.architecture,
        gpus=(spec.hardware.gpu,),
        features=frozenset(),
        objective="throughput",
    )
    arch, gpu = resolve_model(request), get_gpu(spec.hardware.gpu)
    tp = spec.parallelism.tp
    knobs = ShapeKnobs(
        gpu=gpu,
        tp=tp,
        quantization=form.priced_as,
        kv_dtype=spec.quantization.kv_cache_dtype,
        ep=default_ep(arch, tp),
        body_bytes=body,
    )
    shape = build_shape(request, shape_context(request, arch, gpu), knobs)
    if shape is None:
        return CandidatePrice(0.0, 0.0, False, False, body, 0.0)
    engine = EngineLoad(shape, traffic, traffic.cached_share(False))
    capacity = engine.capacity(slo, prefill=True, decode=True)
    prediction = predict_figures(max(capacity, 1e-6), request, (None, engine), capacity, (0, 1))
    return CandidatePrice(
        tokens_per_s_per_gpu=prediction.tokens_per_s_per_gpu if capacity > 0 else 0.0,
        capacity_rps=capacity,
        meets_slo=prediction.meets_slo,
        fits=True,
        bytes_per_weight=body,
        weight_gib_per_gpu=(shape.step.engine.weight_bytes or 0.0) / tp / GIB,
    )
