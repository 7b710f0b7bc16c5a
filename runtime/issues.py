"""`Issue`: one finding about a RuntimeSpec, as a person and the REST API will see it.

An issue's ``field`` is the machine's dotted path (``speculator.draft_model``); its ``message`` and
``fix`` are for people, so spec paths in them are written as the words the console labels the
field with ("draft model"). That happens here, once, as each issue is made: rules may name a
field by its path and every reader (console, API, CLI) gets the same plain text.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Issue:
    """A problem with one field: errors block a deploy, warnings inform.

    `field` is the dotted path of the spec field to change ("parallelism.tp"); `code` is stable
    and machine-readable; `message` says what is wrong and `fix` what to do about it.
    """

    severity: Severity
    field: str
    code: str
    message: str
    fix: str | None = None

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def as_dict(self) -> dict[str, str | None]:
        return asdict(self)


# What people call a spec field, in running text (lower case unless a name). The console's form
# labels say the same; a path missing here is left as it is.
FIELD_WORDS: dict[str, str] = {
    "model.source": "model",
    "model.served_name": "served model name",
    "model.context_length": "context length",
    "model.trust_remote_code": "trust remote code",
    "hardware.gpu": "GPU type",
    "hardware.gpus_per_replica": "GPUs per replica",
    "hardware.nodes_per_replica": "nodes per replica",
    "hardware.price_per_gpu_hour": "price per GPU-hour",
    "parallelism.tp": "tensor parallel size (TP)",
    "parallelism.pp": "pipeline parallel size (PP)",
    "parallelism.attn_dp": "attention data parallel size",
    "parallelism.ep": "expert parallel size (EP)",
    "disaggregation.enabled": "split prefill and decode",
    "disaggregation.prefill.tp": "prefill TP",
    "disaggregation.decode.tp": "decode TP",
    "disaggregation.prefill.replicas": "prefill replicas",
    "disaggregation.decode.replicas": "decode replicas",
    "disaggregation.transfer_backend": "KV transfer backend",
    "disaggregation.decode_radix_cache": "radix cache on decode",
    "batching.max_running_requests": "max running requests",
    "batching.max_prefill_tokens": "max prefill tokens",
    "batching.chunked_prefill_size": "chunked prefill size",
    "batching.page_size": "page size",
    "batching.mem_fraction_static": "static memory fraction",
    "batching.cuda_graph_max_bs_decode": "CUDA graph max batch",
    "batching.cuda_graph_trim": "CUDA graphs trimmed to concurrency",
    "batching.radix_cache": "radix (prefix) cache",
    "batching.mixed_chunk": "mixed chunk",
    "quantization.method": "weight quantization",
    "quantization.kv_cache_dtype": "KV-cache type",
    "speculator.algorithm": "speculative decoding algorithm",
    "speculator.draft_model": "draft model",
    "speculator.num_steps": "speculative steps",
    "speculator.eagle_topk": "EAGLE top-k",
    "speculator.num_draft_tokens": "draft tokens",
    "speculator.ngram": "n-gram settings",
    "speculator.ngram.min_bfs_breadth": "n-gram min breadth",
    "speculator.ngram.max_bfs_breadth": "n-gram max breadth",
    "routing.policy": "routing policy",
    "autoscaling.min_replicas": "min replicas",
    "autoscaling.max_replicas": "max replicas",
    "autoscaling.concurrency_target": "concurrency target",
    "autoscaling.scale_to_zero": "scale to zero",
}
# A dotted path as rules write it: two or more lower-case words joined by dots.
_PATH = re.compile(r"(?<![\w./-])[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+(?![\w/-])")


def field_words(path: str) -> str:
    """The words people know for a spec field ("parallelism.tp" -> "tensor parallel size (TP)")."""
    return FIELD_WORDS.get(path.removeprefix("spec."), path)


def plain(text: str) -> str:
    """``text`` with every known spec path written as its words."""
    return _PATH.sub(lambda m: FIELD_WORDS.get(m.group(0), m.group(0)), text)


def error(field: str, code: str, message: str, fix: str | None = None) -> Issue:
    return Issue("error", field, code, plain(message), plain(fix) if fix else fix)


def warning(field: str, code: str, message: str, fix: str | None = None) -> Issue:
    return Issue("warning", field, code, plain(message), plain(fix) if fix else fix)


def choices_text(values: list[int] | list[str]) -> str:
    """'2, 4 or 8' for a fix message."""
    words = [str(v) for v in values]
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]
