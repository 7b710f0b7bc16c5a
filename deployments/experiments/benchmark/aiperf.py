"""NVIDIA AIPerf's command line for one load point, and its results export read back.

Pure functions. ``aiperf_points`` builds a sweep's command lines with the slots a runner fills
(``deployments.aiperf``: the key, the tokenizer's folder, the artifact folder), which the
benchmark run hands to the cluster's driver: the local runner (a subprocess from the tools
environment, ``deployments.drivers.local.tools_env``) or the Kubernetes Job
(``deployments.drivers.kube.benchmark_job``). The tool's own facts (version, images, settings,
environment, the tokenizer Plinth ships) are ``deployments.aiperf``'s.

No tokenizer is downloaded at run time: AIPerf cuts synthetic prompts with the small tokenizer
Plinth ships (``runtime/catalog/tokenizers/plinth-sim``, or a path the caller gives, e.g. the
model's own), and every token count in the results is the server's (``--use-server-token-count``).

Every request asks for exactly the profile's answer length: ``max_completion_tokens`` (AIPerf's
``--osl``) pinned with ``ignore_eos`` and ``min_tokens`` (SGLang's OpenAI routes take both), so an
answer the model would have ended early does not make the figures describe shorter answers than
asked. Each point stores the length asked beside the lengths measured, how many answers differed
from it, and how many were empty: AIPerf counts an answer with no text as an error ("No responses
with actual content"), but it is the engine's valid answer, so it is counted apart, with a note.

The API key travels as ``--api-key``; ``redacted`` is what may be logged or stored.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deployments.aiperf import (
    ARTIFACT_DIR_SLOT,
    EXPORT_FILE,
    KEY_SLOT,
    TOKENIZER_DIR,
    TOKENIZER_SLOT,
)
from deployments.experiments.benchmark.profile import (
    LATENCIES,
    PERCENTILES,
    LoadPoint,
    PointResult,
    load_points,
)
from deployments.experiments.benchmark.profile import TrafficProfile as Profile

GRACE_S = 10  # seconds AIPerf waits for in-flight answers after a point's duration
BENCHMARK_HEADER = "X-Plinth-Benchmark"
REVISION_HEADER = "X-Plinth-Revision"  # the gateway's pin: serving or a running canary's revision
# AIPerf's metric tags for the latencies a point reports.
_TAGS = {"ttft": "time_to_first_token", "itl": "inter_token_latency", "e2e": "request_latency"}
# How AIPerf's export names an answer that carried no text (an error to AIPerf).
_EMPTY_ANSWER = ("InvalidInferenceResultError", "No responses with actual content")


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
        # Every answer as long as asked: the model's own end (EOS) neither comes early nor counts.
        "--extra-inputs", "ignore_eos:true",
        "--extra-inputs", f"min_tokens:{profile.output_tokens}",
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


def aiperf_points(
    profile: Profile, *, url: str, model: str, benchmark_id: str = "", revision: int | None = None
) -> list[list[str]]:
    """The sweep's command lines, one per load point in order, with the key, tokenizer and
    artifact folder left as slots for the runner (``deployments.aiperf.filled``)."""
    return [
        aiperf_argv(
            profile,
            point,
            url=url,
            model=model,
            api_key=KEY_SLOT,
            artifact_dir=ARTIFACT_DIR_SLOT,
            tokenizer=TOKENIZER_SLOT,
            benchmark_id=benchmark_id,
            revision=revision,
        )
        for point in load_points(profile)
    ]


def redacted(argv: list[str]) -> list[str]:
    """``argv`` with the API key's value masked, for logs and the stored command."""
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--api-key":
            out[i + 1] = "<redacted>"
    return out


def _stat(data: dict[str, Any], tag: str, stat: str = "avg") -> float:
    value = (data.get(tag) or {}).get(stat)
    return float(value) if isinstance(value, (int, float)) else 0.0


def _is_empty_answer(error: dict[str, Any]) -> bool:
    details = error.get("error_details") or {}
    kind, message = _EMPTY_ANSWER
    return details.get("type") == kind and message in str(details.get("message", ""))


def _error_line(error: dict[str, Any]) -> str:
    details = error.get("error_details") or {}
    return (
        f"{details.get('type') or 'error'}: {details.get('message', '')} (x{error.get('count', 1)})"
    )


def parse_export(data: dict[str, Any], point: LoadPoint, *, output_tokens: int) -> PointResult:
    """A point's figures from AIPerf's ``profile_export_aiperf.json``, for a profile that asked
    for answers of ``output_tokens`` tokens."""
    latency = {}
    for name, tag in _TAGS.items():
        if tag in data:
            latency[name] = {pct: round(_stat(data, tag, pct), 3) for pct in PERCENTILES}
    summary = [e for e in data.get("error_summary") or [] if isinstance(e, dict)]
    empty = sum(int(e.get("count", 1)) for e in summary if _is_empty_answer(e))
    result = PointResult(
        kind=point.kind,
        value=point.value,
        requests=int(_stat(data, "request_count")),
        errors=max(0, int(_stat(data, "error_request_count")) - empty),
        duration_s=round(_stat(data, "benchmark_duration"), 3),
        output_tokens_per_s=round(_stat(data, "output_token_throughput"), 3),
        requests_per_s=round(_stat(data, "request_throughput"), 4),
        input_tokens_mean=round(_stat(data, "input_sequence_length"), 2),
        output_tokens_requested=output_tokens,
        output_tokens_mean=round(_stat(data, "output_sequence_length"), 2),
        output_tokens_min=round(_stat(data, "output_sequence_length", "min"), 2),
        off_length_answers=int(_stat(data, "osl_mismatch_count")),
        empty_answers=empty,
        latency_ms={k: v for k, v in latency.items() if k in LATENCIES},
        error_summary=[_error_line(e) for e in summary if not _is_empty_answer(e)][:10],
    )
    result.notes = answer_notes(result)
    return result


def answer_notes(result: PointResult) -> list[str]:
    """What a reader of the point's figures must know about its answers' lengths, in words."""
    notes = []
    if result.off_length_answers:
        notes.append(
            f"{result.off_length_answers} of {result.requests} answers were not the "
            f"{result.output_tokens_requested} output tokens asked for (mean "
            f"{result.output_tokens_mean:g}, shortest {result.output_tokens_min:g}): the "
            "endpoint did not honour ignore_eos / min_tokens, so the figures describe answers "
            "of other lengths than the profile's."
        )
    if result.empty_answers:
        notes.append(
            f"{result.empty_answers} answers had no text (the engine ended them before any "
            "output token). AIPerf counts them as errors; they are counted here as empty "
            "answers, not errors, and the latencies and lengths above leave them out."
        )
    return notes


def read_export(artifact_dir: Path, point: LoadPoint, *, output_tokens: int) -> PointResult:
    return parse_export(
        json.loads((artifact_dir / EXPORT_FILE).read_text()), point, output_tokens=output_tokens
    )
