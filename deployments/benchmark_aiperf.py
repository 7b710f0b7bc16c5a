"""NVIDIA AIPerf's command line for one load point, and its results export read back.

Pure functions shared by both places a benchmark runs: the local runner (a subprocess from the
tools environment, ``deployments.tools_env``) and the Kubernetes Job (``drivers.kube.render``).

No tokenizer is downloaded at run time: AIPerf cuts synthetic prompts with the small tokenizer
Plinth ships (``runtime/catalog/tokenizers/plinth-sim``, or a path the caller gives, e.g. the
model's own), and every token count in the results is the server's (``--use-server-token-count``).
AIPerf 0.13 refuses a tokenizer *path* when ``HF_HUB_OFFLINE`` is set (it then looks the path up
as a cached hub repository), so ``aiperf_env`` clears that variable: a local path never reaches
the hub either way, and telemetry is off.

The API key travels as ``--api-key``; ``redacted`` is what may be logged or stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deployments.benchmark_profile import LATENCIES, PERCENTILES, LoadPoint, PointResult
from deployments.benchmark_profile import TrafficProfile as Profile

TOKENIZER_DIR = (
    Path(__file__).resolve().parent.parent / "runtime" / "catalog" / "tokenizers" / "plinth-sim"
)
EXPORT_FILE = "profile_export_aiperf.json"
GRACE_S = 10  # seconds AIPerf waits for in-flight answers after a point's duration
BENCHMARK_HEADER = "X-Plinth-Benchmark"
REVISION_HEADER = "X-Plinth-Revision"  # the gateway's pin: serving or a running canary's revision
# AIPerf's metric tags for the latencies a point reports.
_TAGS = {"ttft": "time_to_first_token", "itl": "inter_token_latency", "e2e": "request_latency"}


def aiperf_argv(
    profile: Profile,
    point: LoadPoint,
    *,
    url: str,
    model: str,
    api_key: str,
    artifact_dir: str,
    tokenizer: str = str(TOKENIZER_DIR),
    benchmark_id: str = "",
    revision: int | None = None,
    seed: int = 1,
) -> list[str]:
    """``aiperf profile ...`` (without the executable) for one load point against ``url``, the
    endpoint's OpenAI base URL without ``/v1`` (AIPerf appends ``/v1/chat/completions``).
    ``revision`` pins every request to that revision at the gateway (a canary's, say)."""
    prefix = round(profile.input_tokens * profile.shared_prefix)
    argv = [
        "profile",
        "--model", model,
        "--url", url,
        "--endpoint-type", "chat",
        "--streaming",
        "--api-key", api_key,
        "--tokenizer", tokenizer,
        "--use-server-token-count",
        "--isl", str(max(1, profile.input_tokens - prefix)),
        "--isl-stddev", "0",
        "--osl", str(profile.output_tokens),
        "--osl-stddev", "0",
        "--benchmark-duration", str(profile.duration_s),
        "--benchmark-grace-period", str(GRACE_S),
        "--random-seed", str(seed),
        "--output-artifact-dir", artifact_dir,
        "--ui-type", "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
    ]  # fmt: skip
    if benchmark_id:
        argv += ["--header", f"{BENCHMARK_HEADER}:{benchmark_id}"]
    if revision is not None:
        # AIPerf turns a value of digits into a number, then refuses it as a header value; one
        # with a leading zero stays text, and the gateway reads "02" as revision 2.
        argv += ["--header", f"{REVISION_HEADER}:0{revision}"]
    if prefix:
        argv += ["--prompt-prefix-pool-size", "1", "--prompt-prefix-length", str(prefix)]
    if profile.turns > 1:
        argv += ["--conversation-turn-mean", str(profile.turns), "--conversation-turn-stddev", "0"]
    if point.kind == "concurrency":
        argv += ["--concurrency", str(int(point.value))]
    else:
        argv += ["--request-rate", f"{point.value:g}"]
    return argv


def redacted(argv: list[str]) -> list[str]:
    """``argv`` with the API key's value masked, for logs and the stored command."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--api-key":
            out[i + 1] = "<redacted>"
    return out


def aiperf_env(base: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}}
    env["HF_HUB_DISABLE_TELEMETRY"] = "1"
    return env


def _stat(data: dict[str, Any], tag: str, stat: str = "avg") -> float:
    value = (data.get(tag) or {}).get(stat)
    return float(value) if isinstance(value, (int, float)) else 0.0


def parse_export(data: dict[str, Any], point: LoadPoint) -> PointResult:
    """A point's figures from AIPerf's ``profile_export_aiperf.json``."""
    latency = {}
    for name, tag in _TAGS.items():
        if tag in data:
            latency[name] = {pct: round(_stat(data, tag, pct), 3) for pct in PERCENTILES}
    errors = [
        f"{e.get('error_details', {}).get('type') or 'error'}: "
        f"{e.get('error_details', {}).get('message', '')} (x{e.get('count', 1)})"
        for e in data.get("error_summary") or []
        if isinstance(e, dict)
    ]
    return PointResult(
        kind=point.kind,
        value=point.value,
        requests=int(_stat(data, "request_count")),
        errors=int(_stat(data, "error_request_count")),
        duration_s=round(_stat(data, "benchmark_duration"), 3),
        output_tokens_per_s=round(_stat(data, "output_token_throughput"), 3),
        requests_per_s=round(_stat(data, "request_throughput"), 4),
        input_tokens_mean=round(_stat(data, "input_sequence_length"), 2),
        output_tokens_mean=round(_stat(data, "output_sequence_length"), 2),
        latency_ms={k: v for k, v in latency.items() if k in LATENCIES},
        error_summary=errors[:10],
    )


def read_export(artifact_dir: Path, point: LoadPoint) -> PointResult:
    return parse_export(json.loads((artifact_dir / EXPORT_FILE).read_text()), point)
