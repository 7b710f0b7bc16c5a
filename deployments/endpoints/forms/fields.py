"""The settings form's fields as data: its sections in order, each input's label, help, SGLang
flag and everyday names of its choices, and the spec the form starts from.
"""

from __future__ import annotations

from typing import Any

from deployments.endpoints.forms.schema import FormField, Section
from runtime.catalog import kv_cache_labels, list_gpus, list_models, quantization_labels
from runtime.spec import KV_CACHE_DTYPES, PLINTH_ROUTING, QUANTIZATION_METHODS

CUSTOM_ARCH_TOGGLE = "model.custom_architecture"


# Tensor-parallel widths offered for a model of unknown heads.
TP_WIDTHS = (1, 2, 4, 8, 16)


def _gpu_choices() -> tuple[str, ...]:
    return tuple(gpu.id for gpu in list_gpus())


SECTIONS: tuple[Section, ...] = (
    # The first step, always open: what to serve, on what, how many. Every other section is
    # collapsed behind a one-line summary of its values.
    Section(
        "basics",
        "Basics",
        (
            FormField(
                "model.source",
                "Model",
                "a catalogue model or a Hugging Face repo",
                placeholder="meta-llama/Llama-3.1-8B-Instruct",
                flag="--model-path",
            ),
            # The catalogue's GPUs (data, not code): a new GPU needs no change here.
            FormField(
                "hardware.gpu", "GPU type", "prices and memory from the catalogue", _gpu_choices()
            ),
            FormField(
                "autoscaling.min_replicas",
                "Min replicas",
                "copies kept running; 0 with scale to zero",
            ),
            FormField("autoscaling.max_replicas", "Max replicas", "the most copies under load"),
        ),
    ),
    Section(
        "model",
        "Model options",
        (
            FormField(
                "model.served_name",
                "Served model name",
                "the name clients send; default: the model id",
                flag="--served-model-name",
            ),
            FormField(
                "model.context_length",
                "Context length",
                "tokens per request, prompt and answer; default: the model's",
                flag="--context-length",
            ),
            FormField(
                "model.hf_token_secret",
                "Hugging Face token secret",
                "a secret's name, for gated weights",
            ),
            FormField(
                "model.trust_remote_code",
                "Trust remote code",
                "run the model repository's own Python code",
                flag="--trust-remote-code",
            ),
        ),
    ),
    Section(
        "architecture",
        "Custom architecture",
        (
            FormField("model.architecture.num_layers", "Layers", "num_hidden_layers"),
            FormField("model.architecture.hidden_size", "Hidden size", "hidden_size"),
            FormField(
                "model.architecture.num_attention_heads", "Attention heads", "num_attention_heads"
            ),
            FormField("model.architecture.num_kv_heads", "KV heads", "num_key_value_heads"),
            FormField("model.architecture.head_dim", "Head dim", "head_dim"),
            FormField("model.architecture.vocab_size", "Vocabulary size", "vocab_size"),
            FormField(
                "model.architecture.params_b", "Parameters (billions)", "from the model card"
            ),
            FormField("model.architecture.max_context", "Max context", "max_position_embeddings"),
        ),
        advanced=True,
    ),
    Section(
        "hardware",
        "Hardware",
        (
            FormField("hardware.gpus_per_replica", "GPUs per replica", "default: TP x PP"),
            FormField(
                "hardware.price_per_gpu_hour",
                "Price per GPU-hour (USD)",
                "overrides the catalogue's price",
            ),
        ),
    ),
    Section(
        "parallelism",
        "Parallelism",
        (
            FormField(
                "parallelism.tp",
                "Tensor parallel (TP)",
                "GPUs one copy of the model is split over; only widths the model's heads divide",
                flag="--tp-size",
            ),
            FormField(
                "parallelism.pp",
                "Pipeline parallel (PP)",
                "layers split in stages",
                flag="--pp-size",
            ),
            FormField(
                "parallelism.attn_dp",
                "Attention data parallel",
                "for MLA/MoE models; divides TP",
                flag="--dp-size",
            ),
            FormField(
                "parallelism.ep", "Expert parallel (EP)", "MoE models only", flag="--ep-size"
            ),
        ),
    ),
    Section(
        "kv_tiers",
        "KV cache tiers (HiCache)",
        (
            FormField(
                "kv_cache.tiers.host.ratio",
                "Host tier: ratio",
                "host memory kept for evicted prefixes, as a multiple of the GPU KV pool (> 1; "
                "default 2 once any host-tier field is set)",
                flag="--hicache-ratio",
            ),
            FormField(
                "kv_cache.tiers.host.size_gb",
                "Host tier: GB per GPU",
                "overrides the ratio",
                flag="--hicache-size",
            ),
            FormField(
                "kv_cache.tiers.host.write_policy",
                "Host tier: write policy",
                "when GPU pages are copied to host memory",
                flag="--hicache-write-policy",
            ),
            FormField(
                "kv_cache.tiers.host.io_backend",
                "Host tier: I/O backend",
                "kernel (default) or direct copies",
                flag="--hicache-io-backend",
            ),
            FormField(
                "kv_cache.tiers.host.mem_layout",
                "Host tier: memory layout",
                "default page_first",
                flag="--hicache-mem-layout",
            ),
            FormField(
                "kv_cache.tiers.storage.backend",
                "Storage tier: backend",
                "file (node path or claim) or mooncake; needs a host tier",
                flag="--hicache-storage-backend",
            ),
            FormField(
                "kv_cache.tiers.storage.prefetch_policy",
                "Storage tier: prefetch policy",
                "how long a request waits for pages from storage",
                flag="--hicache-storage-prefetch-policy",
            ),
            FormField(
                "kv_cache.tiers.storage.node_path",
                "Storage tier: node path",
                "file backend: a directory on each node",
                placeholder="/mnt/nvme/hicache",
            ),
            FormField(
                "kv_cache.tiers.storage.claim",
                "Storage tier: claim",
                "file backend: a ReadWriteMany PersistentVolumeClaim",
            ),
            FormField(
                "kv_cache.tiers.storage.master_address",
                "Mooncake master",
                "mooncake backend: host:port",
            ),
            FormField(
                "kv_cache.tiers.storage.metadata_server",
                "Mooncake metadata server",
                "mooncake backend: URL",
            ),
            FormField(
                "kv_cache.tiers.storage.device_name",
                "Mooncake RDMA device",
                "mooncake over RDMA: e.g. mlx5_0",
            ),
        ),
    ),
    Section(
        "disaggregation",
        "Prefill/decode pools",
        (
            FormField(
                "disaggregation.enabled",
                "Split prefill and decode",
                "separate GPU pools; replicas are then fixed per pool, not autoscaled",
                flag="--disaggregation-mode",
            ),
            FormField("disaggregation.prefill.replicas", "Prefill replicas", "prefill engines"),
            FormField(
                "disaggregation.prefill.tp", "Prefill TP", "default: the TP above", flag="--tp-size"
            ),
            FormField("disaggregation.decode.replicas", "Decode replicas", "decode engines"),
            FormField(
                "disaggregation.decode.tp", "Decode TP", "default: the TP above", flag="--tp-size"
            ),
            FormField(
                "disaggregation.transfer_backend",
                "KV transfer backend",
                "how the KV cache moves between pools",
                flag="--disaggregation-transfer-backend",
            ),
            FormField(
                "disaggregation.bootstrap_port",
                "Bootstrap port",
                "where decode finds prefill",
                flag="--disaggregation-bootstrap-port",
            ),
            FormField(
                "disaggregation.ib_device",
                "InfiniBand device(s)",
                "e.g. mlx5_0,mlx5_1",
                flag="--disaggregation-ib-device",
            ),
            FormField(
                "disaggregation.decode_radix_cache",
                "Radix cache on decode",
                "reuse prefixes on the decode pool",
                flag="--disaggregation-decode-enable-radix-cache",
            ),
        ),
        advanced=True,
    ),
    Section(
        "batching",
        "Batching",
        (
            FormField(
                "batching.max_running_requests",
                "Max running requests",
                "requests decoded at once; default: sized by SGLang",
                flag="--max-running-requests",
            ),
            FormField(
                "batching.max_prefill_tokens",
                "Max prefill tokens",
                "prompt tokens per prefill batch",
                flag="--max-prefill-tokens",
            ),
            FormField(
                "batching.chunked_prefill_size",
                "Chunked prefill size",
                "long prompts are prefilled in chunks of this many tokens; -1 disables",
                flag="--chunked-prefill-size",
            ),
            FormField(
                "batching.schedule_policy",
                "Schedule policy",
                "which waiting request runs next",
                flag="--schedule-policy",
            ),
            FormField(
                "batching.mem_fraction_static",
                "Static memory fraction",
                "0 to 1: the share of GPU memory for weights + KV cache",
                flag="--mem-fraction-static",
            ),
            FormField(
                "batching.cuda_graph_max_bs_decode",
                "CUDA graph max batch (decode)",
                "largest decode batch captured as a CUDA graph",
                flag="--cuda-graph-max-bs",
            ),
            FormField(
                "batching.cuda_graph_trim",
                "Trim CUDA graphs to concurrency",
                "capture decode graphs only up to twice the autoscaling concurrency target: "
                "a faster cold start",
                flag="--cuda-graph-max-bs-decode",
            ),
            FormField(
                "batching.stream_interval",
                "Stream interval",
                "tokens per streamed chunk",
                flag="--stream-interval",
            ),
            FormField(
                "batching.radix_cache",
                "Radix (prefix) cache",
                "reuse the KV cache of shared prompt prefixes",
                flag="--disable-radix-cache",
            ),
            FormField(
                "batching.mixed_chunk",
                "Mixed chunk",
                "prefill and decode in one batch",
                flag="--enable-mixed-chunk",
            ),
        ),
    ),
    Section(
        "quantization",
        "Quantization",
        (
            FormField(
                "quantization.method",
                "Weights",
                "leave as shipped for a quantized checkpoint; FP8 quantizes a BF16 one on load",
                QUANTIZATION_METHODS,
                flag="--quantization",
                names=quantization_labels(),
            ),
            FormField(
                "quantization.kv_cache_dtype",
                "KV cache",
                "FP8 holds about twice the tokens",
                KV_CACHE_DTYPES,
                flag="--kv-cache-dtype",
                names=kv_cache_labels(),
            ),
        ),
    ),
    Section(
        "speculator",
        "Speculative decoding",
        (
            FormField(
                "speculator.algorithm",
                "Algorithm",
                "a draft proposes tokens the model checks in one step",
                flag="--speculative-algorithm",
            ),
            FormField(
                "speculator.draft_model",
                "Draft model",
                "an EAGLE head or small model trained for this one",
                flag="--speculative-draft-model-path",
            ),
            FormField(
                "speculator.num_steps",
                "Steps",
                "draft steps per check",
                flag="--speculative-num-steps",
            ),
            FormField(
                "speculator.eagle_topk",
                "EAGLE top-k",
                "branches per draft step",
                flag="--speculative-eagle-topk",
            ),
            FormField(
                "speculator.num_draft_tokens",
                "Draft tokens",
                "tokens checked per step",
                flag="--speculative-num-draft-tokens",
            ),
        ),
    ),
    Section(
        "routing",
        "Routing",
        (
            FormField(
                "routing.policy",
                "Policy",
                "how the router picks a replica",
                flag="--policy",
                router=True,
            ),
            FormField(
                "routing.placement",
                "Placement of a new prompt prefix",
                "cache_aware only. Default by count: the gateway gives each new prefix the replica"
                " with the least recent traffic; first fit: smg's cache tree places it, with the"
                " knobs below",
                names={"by_count": "by count", "first_fit": "first fit (smg's tree)"},
            ),
            # Empty numbers take Plinth's measured defaults (runtime.spec.PLINTH_ROUTING), shown.
            FormField(
                "routing.cache_threshold",
                "Cache threshold",
                "0 to 1: the share of a prompt a replica must hold to keep getting it",
                placeholder=f"default {PLINTH_ROUTING.cache_threshold}",
                flag="--cache-threshold",
                router=True,
            ),
            FormField(
                "routing.balance_abs_threshold",
                "Balance threshold (load gap)",
                "balance by load instead of cache past this gap in running requests",
                placeholder=f"default {PLINTH_ROUTING.balance_abs_threshold}",
                flag="--balance-abs-threshold",
                router=True,
            ),
            FormField(
                "routing.balance_rel_threshold",
                "Balance threshold (load ratio)",
                "...and past this ratio of the busiest replica's load to the idlest's",
                placeholder=f"default {PLINTH_ROUTING.balance_rel_threshold}",
                flag="--balance-rel-threshold",
                router=True,
            ),
            FormField(
                "routing.overload_protection",
                "Overload protection (moves requests off)",
                "move requests off a busy replica",
                flag="--worker-overload-protection",
                router=True,
            ),
            FormField(
                "routing.warmup_seconds",
                "Warm-up diversion to new replicas (s)",
                "new replicas get fewer requests for this long",
                placeholder=f"default {PLINTH_ROUTING.warmup_seconds}",
                flag="--worker-warmup-secs",
                router=True,
            ),
        ),
    ),
    Section(
        "autoscaling",
        "Autoscaling",
        (
            FormField(
                "autoscaling.concurrency_target",
                "Concurrency target",
                "in-flight requests per replica",
            ),
            FormField(
                "autoscaling.scale_down_delay_seconds",
                "Scale-down delay (s)",
                "quiet time before a replica is removed",
            ),
            FormField(
                "autoscaling.scale_to_zero", "Scale to zero when idle", "no GPUs while unused"
            ),
            FormField(
                "autoscaling.scale_to_zero_after_seconds",
                "Idle time before zero (s)",
                "how long idle before the last replica stops",
            ),
            FormField(
                "autoscaling.warm_replicas",
                "Warm replicas",
                "kept loaded, GPU memory released, when scaled down: resumed, not restarted",
            ),
            FormField(
                "autoscaling.slo.ttft_p90_ms",
                "SLO: TTFT p90 (ms)",
                "set a target to scale on latency instead of the concurrency target",
            ),
            FormField(
                "autoscaling.slo.itl_p90_ms", "SLO: ITL p90 (ms)", "time between streamed tokens"
            ),
        ),
    ),
)

ALL_FIELDS: tuple[FormField, ...] = tuple(f for s in SECTIONS for f in s.fields)
ARCH_PREFIX = "model.architecture."

DEFAULT_SPEC: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
}


def model_choices() -> list[str]:
    """Ids and repos offered in the model search (a datalist), targets before draft heads."""
    models = sorted(list_models(), key=lambda m: m.draft_algorithm is not None)
    return [m.hf_repo or m.id for m in models]
