"""The create wizard's templates: a starting spec for a common kind of traffic, one click each.

Each template is a RuntimeSpec dict on the catalogue's default model and GPU that passes every
rule with no warning (tests check this), so choosing one and pressing "Create" deploys something
sound. The figures are sized with ``runtime.estimate`` so the KV cache holds the max running
requests at the template's full context length on one H100.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

_MODEL = {"source": "meta-llama/Llama-3.1-8B-Instruct"}
_GPU = {"gpu": "H100-SXM"}


@dataclass(frozen=True)
class Preset:
    key: str  # in the URL: /endpoints/new/?template=<key>
    title: str
    blurb: str
    slug: str  # the slug the form starts with (a person may change it)
    spec: dict[str, Any]

    def spec_copy(self) -> dict[str, Any]:
        return copy.deepcopy(self.spec)


PRESETS: tuple[Preset, ...] = (
    Preset(
        "chat",
        "Chat, latency first",
        "Streamed answers to people: a small running batch keeps each token quick, prefixes "
        "reused across a conversation's turns, up to 4 replicas on load.",
        "chat",
        {
            "model": {**_MODEL, "context_length": 16384},
            "hardware": _GPU,
            "batching": {"max_running_requests": 24, "schedule_policy": "lpm"},
            "autoscaling": {"min_replicas": 1, "max_replicas": 4, "concurrency_target": 16},
        },
    ),
    Preset(
        "batch",
        "Batch, throughput first",
        "Offline jobs: large running batches and an FP8 KV cache for the most tokens per "
        "GPU-hour; latency per request is higher.",
        "batch",
        {
            "model": {**_MODEL, "context_length": 8192},
            "hardware": _GPU,
            "batching": {"max_running_requests": 96, "chunked_prefill_size": 8192},
            "quantization": {"kv_cache_dtype": "fp8_e4m3"},
            "autoscaling": {"min_replicas": 1, "max_replicas": 2, "concurrency_target": 96},
        },
    ),
    Preset(
        "long-context",
        "Long context",
        "Whole documents: the model's full 128K-token context with an FP8 KV cache; a few "
        "long requests at a time.",
        "long-context",
        {
            "model": {**_MODEL, "context_length": 131072},
            "hardware": _GPU,
            "batching": {"max_running_requests": 6},
            "quantization": {"kv_cache_dtype": "fp8_e4m3"},
            "autoscaling": {"min_replicas": 1, "max_replicas": 2, "concurrency_target": 4},
        },
    ),
)
_BY_KEY = {p.key: p for p in PRESETS}


def preset(key: str) -> Preset | None:
    return _BY_KEY.get(key)
