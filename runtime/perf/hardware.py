"""The GPU and model shapes the performance model works on, taken from the runtime catalogues.

The physics (``runtime.perf``) and the simulator work on these small frozen shapes rather than on
the catalogue's pydantic rows, so both can be unit-tested with hand-made shapes; the resolvers
below are the one place that reads ``runtime.catalog`` for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.catalog import GpuType, ModelArch


class UnknownGpu(Exception):
    """``--sim-gpu`` names no GPU in the catalogue."""


@dataclass(frozen=True)
class GpuShape:
    id: str
    name: str
    memory_gib: float
    sm: int  # compute capability x10, e.g. 90 for Hopper
    hbm_bandwidth_gbs: float
    bf16_tflops: float
    fp8_tflops: float | None
    fp4_tflops: float | None
    host_link_gbs: float = 64.0  # one direction, to host memory (HiCache's load-back)
    gpus_per_node: int = 8  # NVLink domain: a TP group wider than this spans nodes


@dataclass(frozen=True)
class ModelShape:
    id: str
    hf_repo: str
    architecture: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    params_b: float
    active_params_b: float
    max_context: int
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    checkpoint_quantization: str | None = None
    checkpoint_bytes_per_param: float = 2.0
    num_experts: int | None = None  # routed experts per MoE layer (None: dense)
    experts_per_token: int | None = None  # experts each token is routed to
    intermediate_size: int | None = None  # MLP width (a routed expert's, for MoE)

    @property
    def expert_params_b(self) -> float:
        """Routed-expert weights (billions) of a MoE model; 0 for a dense one.

        From the totals alone: active = dense + experts x k / E, total = dense + experts.
        """
        if not self.num_experts or not self.experts_per_token:
            return 0.0
        share = self.experts_per_token / self.num_experts
        if share >= 1 or self.active_params_b >= self.params_b:
            return 0.0
        return max(0.0, (self.params_b - self.active_params_b) / (1 - share))

    def kv_bytes_per_token(self, dtype_bytes: float) -> float:
        """KV cache bytes per token over all layers (MLA stores one latent vector per layer)."""
        if self.kv_lora_rank:
            per_layer = self.kv_lora_rank + (self.qk_rope_head_dim or 0)
        else:
            per_layer = 2 * self.num_kv_heads * self.head_dim
        return self.num_layers * per_layer * dtype_bytes

    @property
    def embedding_params_b(self) -> float:
        """Input embedding plus LM head (billions): the two vocab x hidden matrices.

        Quantized checkpoints (FP8, NVFP4) keep both in BF16; the catalogue does not record tied
        embeddings, so both count, which errs towards more memory and a slower LM head.
        """
        return min(self.params_b / 2, 2 * self.vocab_size * self.hidden_size / 1e9)

    def weight_bytes(self, bytes_per_param: float) -> float:
        """All weights at an average `bytes_per_param` (a checkpoint's on-disk figure)."""
        return self.params_b * 1e9 * bytes_per_param

    def quantized_weight_bytes(self, bytes_per_param: float) -> float:
        """Weights quantized at `bytes_per_param`, embedding and LM head kept in BF16."""
        if bytes_per_param >= 2.0:
            return self.params_b * 1e9 * bytes_per_param
        body = self.params_b - self.embedding_params_b
        return (body * bytes_per_param + self.embedding_params_b * 2.0) * 1e9


H100_SXM = GpuShape(
    id="H100-SXM",
    name="NVIDIA H100 80GB HBM3 (simulated)",
    memory_gib=79.6,
    sm=90,
    hbm_bandwidth_gbs=3350,
    bf16_tflops=989,
    fp8_tflops=1979,
    fp4_tflops=None,
    host_link_gbs=64.0,
)

# Stand-in for a --model-path the catalogue does not know: a Llama-3.1-8B-like dense model.
DEFAULT_MODEL = ModelShape(
    id="sim-default-8b",
    hf_repo="",
    architecture="LlamaForCausalLM",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    vocab_size=128256,
    params_b=8.0,
    active_params_b=8.0,
    max_context=131072,
)


def resolve_gpu(name: str) -> GpuShape:
    catalog = _catalog()
    if catalog is None:
        if name.lower().replace("_", "-") in ("h100-sxm", "h100"):
            return H100_SXM
        raise UnknownGpu(f"unknown GPU {name!r} (runtime.catalog is not available)")
    try:
        gpu = catalog.get_gpu(name)
    except KeyError as exc:
        raise UnknownGpu(f"unknown GPU {name!r}") from exc
    return gpu_shape(gpu)


def resolve_model(model_path: str, warn: Callable[[str], None]) -> ModelShape:
    catalog = _catalog()
    arch = catalog.get_model(model_path) if catalog is not None else None
    if arch is None:
        warn(
            f"WARNING: runtime.sim: model {model_path!r} is not in the model catalogue; "
            f"simulating a default {DEFAULT_MODEL.params_b:g}B dense architecture"
        )
        return DEFAULT_MODEL
    return model_shape(arch, model_path)


def lookup_model(model_path: str) -> ModelShape | None:
    """The catalogue's shape for `model_path`, or None (no warning: drafts may be uncatalogued)."""
    catalog = _catalog()
    arch = catalog.get_model(model_path) if catalog is not None else None
    return None if arch is None else model_shape(arch, model_path)


def _catalog() -> Any:
    try:
        import runtime.catalog as catalog
    except ImportError:
        return None
    return catalog


def gpu_shape(gpu: GpuType) -> GpuShape:
    """The catalogue's GPU row as the physics' frozen shape."""
    return GpuShape(
        id=str(gpu.id),
        name=str(gpu.name),
        memory_gib=float(gpu.memory_gib),
        sm=_sm_number(gpu.sm),
        hbm_bandwidth_gbs=float(gpu.hbm_bandwidth_gbs),
        bf16_tflops=float(gpu.bf16_tflops),
        fp8_tflops=_optional_float(gpu.fp8_tflops),
        fp4_tflops=_optional_float(gpu.fp4_tflops),
        host_link_gbs=float(gpu.host_link_gbs),
        gpus_per_node=int(gpu.gpus_per_node),
    )


def model_shape(arch: ModelArch, model_path: str) -> ModelShape:
    """The catalogue's (or a request's) architecture as the physics' frozen shape."""
    active = getattr(arch, "active_params_b", None) or arch.params_b
    head_dim = getattr(arch, "head_dim", None) or arch.hidden_size // arch.num_attention_heads
    return ModelShape(
        id=str(arch.id),
        hf_repo=str(getattr(arch, "hf_repo", "") or model_path),
        architecture=str(getattr(arch, "architecture", "") or "LlamaForCausalLM"),
        num_layers=int(arch.num_layers),
        hidden_size=int(arch.hidden_size),
        num_attention_heads=int(arch.num_attention_heads),
        num_kv_heads=int(getattr(arch, "num_kv_heads", None) or arch.num_attention_heads),
        head_dim=int(head_dim),
        vocab_size=int(arch.vocab_size),
        params_b=float(arch.params_b),
        active_params_b=float(active),
        max_context=int(arch.max_context),
        kv_lora_rank=getattr(arch, "kv_lora_rank", None),
        qk_rope_head_dim=getattr(arch, "qk_rope_head_dim", None),
        checkpoint_quantization=getattr(arch, "checkpoint_quantization", None),
        checkpoint_bytes_per_param=float(getattr(arch, "checkpoint_bytes_per_param", 2.0)),
        num_experts=getattr(arch, "num_experts", None),
        experts_per_token=getattr(arch, "experts_per_token", None),
        intermediate_size=getattr(arch, "intermediate_size", None),
    )


def _sm_number(value: Any) -> int:
    """Accept 90, "90", "9.0" or 9.0 for compute capability 9.0."""
    number = float(str(value))
    return round(number * 10) if number < 20 else int(number)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)
