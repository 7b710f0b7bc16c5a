"""The SGLang flags a user may add through `runtime.extra_flags`, and how values become argv.

Everything Plinth manages itself (model, parallelism, ports, metrics, disaggregation, speculation,
quantization...) comes from typed spec fields, so a person cannot contradict the plan through a raw
flag. The allowlist holds the tuning knobs that have no typed field and are safe to pass through.
"""

from __future__ import annotations

from runtime.spec import ExtraFlagValue

EXTRA_FLAG_ALLOWLIST: frozenset[str] = frozenset(
    {
        # parsers and templates
        "--reasoning-parser",
        "--tool-call-parser",
        "--chat-template",
        "--completion-template",
        "--hf-chat-template-name",
        "--sampling-defaults",
        "--preferred-sampling-params",
        "--json-model-override-args",
        "--tokenizer-mode",
        "--allow-auto-truncate",
        "--stream-response-default-include-usage",
        # kernels and backends
        "--attention-backend",
        "--prefill-attention-backend",
        "--decode-attention-backend",
        "--sampling-backend",
        "--grammar-backend",
        "--moe-runner-backend",
        "--moe-a2a-backend",
        "--deepep-mode",
        "--fp8-gemm-backend",
        "--fp4-gemm-backend",
        "--enable-torch-compile",
        "--torch-compile-max-bs",
        "--cuda-graph-max-bs-prefill",
        "--disable-cuda-graph-padding",
        "--speculative-attention-mode",
        "--speculative-draft-attention-backend",
        "--speculative-moe-runner-backend",
        # scheduling and caches
        "--max-queued-requests",
        "--num-continuous-decode-steps",
        "--radix-eviction-policy",
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "--hicache-size",
        "--enable-eplb",
        "--ep-num-redundant-experts",
        "--enable-dp-lm-head",
        "--num-reserved-decode-tokens",
        # loading and operations
        "--load-format",
        "--download-dir",
        "--model-loader-extra-config",
        "--watchdog-timeout",
        "--dist-timeout",
        "--skip-server-warmup",
        "--log-level",
        "--log-requests",
        "--log-requests-level",
        "--enable-metrics-for-all-schedulers",
    }
)


def flag_argv(flag: str, value: ExtraFlagValue) -> list[str]:
    """argv for one extra flag: `True` is a bare switch, `False` leaves it out, lists spread."""
    if isinstance(value, bool):
        return [flag] if value else []
    if isinstance(value, list):
        return [flag, *value]
    return [flag, str(value)]
