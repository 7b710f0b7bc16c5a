"""Step time of one forward pass: the simulator's adapter to ``runtime.perf``.

The physics (kernel efficiencies, quantization, all-reduce, speculative drafting) lives in
``runtime.perf.step``; this module turns the engine's launch flags into its ``EngineShape``.
"""

from __future__ import annotations

from runtime.perf.hardware import GpuShape, ModelShape, lookup_model
from runtime.perf.lora import LoraCost, lora_cost
from runtime.perf.quant import kv_dtype_bytes
from runtime.perf.spec import SpecConfig, resolve_spec
from runtime.perf.step import EngineShape, StepModel, StepWork
from runtime.sim.args import EngineArgs
from runtime.sim.lora import lora_config
from runtime.sim.memory import effective_quantization, model_weight_bytes

__all__ = ["Roofline", "StepWork", "engine_spec"]


def engine_spec(args: EngineArgs, model: ModelShape) -> SpecConfig | None:
    """The speculative configuration the flags ask for, with SGLang's defaults filled in."""
    if args.speculative_algorithm is None:
        return None
    path = args.speculative_draft_model_path
    draft = lookup_model(path) if path else None
    return resolve_spec(
        args.speculative_algorithm,
        model,
        draft,
        num_steps=args.speculative_num_steps,
        topk=args.speculative_eagle_topk,
        draft_tokens=args.speculative_num_draft_tokens,
        acceptance=args.sim.spec_accept_rate,
    )


def engine_lora(args: EngineArgs, model: ModelShape) -> LoraCost | None:
    """The adapters' step cost figures, or None without LoRA."""
    config = lora_config(args, model)
    if config is None:
        return None
    return lora_cost(model, config.modules, config.rank, max(1, args.tp_size))


class Roofline(StepModel):
    """The step model of an engine launched with `args`."""

    def __init__(self, args: EngineArgs, gpu: GpuShape, model: ModelShape) -> None:
        engine = EngineShape(
            tp=max(1, args.tp_size),
            quantization=effective_quantization(args, model),
            weight_bytes=model_weight_bytes(args, model),
            kv_bytes_per_value=kv_dtype_bytes(args.kv_cache_dtype, args.dtype),
            spec=engine_spec(args, model),
            attn_dp=max(1, args.attn_dp_size),  # --enable-dp-attention --dp-size N
            ep=max(1, args.ep_size),
            moe_a2a=args.moe_a2a_backend,
            lora=engine_lora(args, model),
        )
        super().__init__(gpu, model, engine)
