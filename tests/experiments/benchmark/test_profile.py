"""Traffic profiles, AIPerf's command line and export, the prediction and the comparison: the
pure rules a benchmark runs by (no process, no database)."""

from __future__ import annotations

from typing import Any

import pytest

from deployments.aiperf import TOKENIZER_DIR, aiperf_env
from deployments.experiments.benchmark.aiperf import aiperf_argv, parse_export, redacted
from deployments.experiments.benchmark.profile import (
    LoadPoint,
    ProfileError,
    compare,
    load_points,
    parse_profile,
    predict,
)
from runtime.spec import RuntimeSpec

SPEC = RuntimeSpec.model_validate(
    {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"concurrency": []}, "concurrency"),
        ({"concurrency": [1, 2, 3, 4, 5, 6, 7, 8, 9]}, "concurrency"),
        ({"concurrency": [2.5]}, "concurrency"),
        ({"input_tokens": 0}, "input_tokens"),
        ({"output_tokens": True}, "output_tokens"),
        ({"turns": 21}, "turns"),
        ({"request_rate": 0}, "request_rate"),
        ({"duration_s": 1}, "duration_s"),
        ({"warmup": 3}, "warmup"),
    ],
)
def test_a_bad_profile_names_its_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_profile(body)
    assert caught.value.field == field


def test_a_sweep_is_sorted_and_a_rate_is_one_point() -> None:
    assert [p.value for p in load_points(parse_profile({"concurrency": [8, 1, 4]}))] == [1, 4, 8]
    rate = parse_profile({"request_rate": 2.5})
    assert rate.concurrency == () and load_points(rate) == [LoadPoint("request_rate", 2.5)]


def test_the_command_uses_the_shipped_tokenizer_and_the_servers_token_counts() -> None:
    profile = parse_profile(
        {"input_tokens": 1000, "output_tokens": 50, "shared_prefix": 0.4, "turns": 3}
    )
    argv = aiperf_argv(
        profile, LoadPoint("concurrency", 4), url="http://gw/endpoints/chat", model="chat",
        api_key="pk_secret", artifact_dir="/tmp/x", benchmark_id="b1", revision=2,
    )  # fmt: skip
    joined = " ".join(argv)
    assert f"--tokenizer {TOKENIZER_DIR}" in joined and "--use-server-token-count" in argv
    assert (TOKENIZER_DIR / "tokenizer.json").is_file()
    # 40% of the prompt is one prefix every request shares; the rest is the request's own.
    assert "--isl 600" in joined and "--prompt-prefix-length 400" in joined
    assert "--conversation-turn-mean 3" in joined and "--concurrency 4" in joined
    # Every answer asks for 50 tokens and pins it, so the model's own end cannot shorten it.
    assert "--osl 50" in joined and "--osl-stddev 0" in joined
    pins = [argv[i + 1] for i, a in enumerate(argv) if a == "--extra-inputs"]
    assert pins == ["ignore_eos:true", "min_tokens:50"]
    headers = [argv[i + 1] for i, a in enumerate(argv) if a == "--header"]
    assert headers == ["X-Plinth-Benchmark:b1", "X-Plinth-Revision:02"]  # the gateway's pin
    assert "pk_secret" not in redacted(argv) and "pk_secret" in argv
    env = aiperf_env({"HF_HUB_OFFLINE": "1", "PATH": "/bin"})
    assert "HF_HUB_OFFLINE" not in env and env["PATH"] == "/bin"
    assert env["AIPERF_METRICS_OSL_MISMATCH_PCT_THRESHOLD"] == "0"  # every off-length answer


def test_aiperf_inherits_none_of_the_workers_secrets() -> None:
    worker = {
        "PATH": "/usr/bin",
        "HOME": "/home/plinth",
        "LC_ALL": "C.UTF-8",
        "HTTPS_PROXY": "http://proxy:3128",
        "no_proxy": "localhost",
        "SECRET_KEY": "django-secret",
        "DATABASE_URL": "postgres://plinth:pw@db/plinth",
        "REDIS_URL": "redis://:pw@redis:6379/0",
        "PLINTH_FIELD_ENCRYPTION_KEY": "fernet",
        "AWS_SECRET_ACCESS_KEY": "aws",
        "HF_TOKEN": "hf_secret",
    }
    env = aiperf_env(worker)
    assert {k: env[k] for k in ("PATH", "HOME", "LC_ALL", "HTTPS_PROXY", "no_proxy")} == {
        k: worker[k] for k in ("PATH", "HOME", "LC_ALL", "HTTPS_PROXY", "no_proxy")
    }
    for secret in ("SECRET_KEY", "DATABASE_URL", "REDIS_URL", "PLINTH_FIELD_ENCRYPTION_KEY"):
        assert secret not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env and "HF_TOKEN" not in env


EXPORT = {
    "request_count": {"unit": "requests", "avg": 230.0},
    "error_request_count": {"unit": "requests", "avg": 3.0},
    "benchmark_duration": {"unit": "sec", "avg": 4.07},
    "request_throughput": {"unit": "requests/sec", "avg": 56.36},
    "output_token_throughput": {"unit": "tokens/sec", "avg": 1716.0},
    "input_sequence_length": {"unit": "tokens", "avg": 101.5},
    "output_sequence_length": {"unit": "tokens", "avg": 30.4, "min": 3.0, "max": 32.0},
    "osl_mismatch_count": {"unit": "requests", "avg": 41.0},
    "time_to_first_token": {"unit": "ms", "avg": 21.9, "p50": 7.25, "p90": 59.3, "p99": 102.0},
    "inter_token_latency": {"unit": "ms", "avg": 0.96, "p50": 0.70, "p90": 1.83, "p99": 3.49},
    "request_latency": {"unit": "ms", "avg": 50.3, "p50": 28.3, "p90": 107.4, "p99": 157.8},
    "error_summary": [
        {
            "error_details": {
                "type": "InvalidInferenceResultError",
                # As AIPerf 0.13 words an answer that carried no text.
                "message": "InvalidInferenceResultError('Invalid inference result: No responses "
                "with actual content were received from the server (only usage/metadata, "
                "null/empty data, or [DONE] markers)')",
            },
            "count": 2,
        },
        {"error_details": {"type": "HTTPError", "message": "502 Bad Gateway"}, "count": 1},
    ],
}


def test_an_export_becomes_a_point() -> None:
    point = parse_export(EXPORT, LoadPoint("concurrency", 4), output_tokens=32)
    assert (point.requests, point.requests_per_s) == (230, 56.36)
    assert point.latency_ms["ttft"] == {"p50": 7.25, "p90": 59.3, "p99": 102.0}
    assert point.latency_ms["e2e"]["p99"] == 157.8


def test_a_point_reports_the_asked_and_measured_lengths_and_empty_answers_apart() -> None:
    point = parse_export(EXPORT, LoadPoint("concurrency", 4), output_tokens=32)
    assert (point.output_tokens_requested, point.output_tokens_mean) == (32, 30.4)
    assert (point.output_tokens_min, point.off_length_answers) == (3.0, 41)
    # AIPerf's 3 errors: 2 empty answers (valid answers with no text) and 1 real failure.
    assert (point.empty_answers, point.errors) == (2, 1)
    assert point.error_summary == ["HTTPError: 502 Bad Gateway (x1)"]
    off_length, empty = point.notes
    assert off_length.startswith("41 of 230 answers were not the 32 output tokens asked for")
    assert "mean 30.4, shortest 3" in off_length
    assert empty.startswith("2 answers had no text") and "not errors" in empty


def test_the_prediction_grows_with_the_load_and_keeps_littles_law() -> None:
    rows = predict(SPEC, parse_profile({"concurrency": [1, 16, 4096]}), replicas=1)
    by_load = {r["value"]: r for r in rows}
    assert by_load[16]["requests_per_s"] > by_load[1]["requests_per_s"]
    assert by_load[4096]["ttft_p90_ms"] > by_load[1]["ttft_p90_ms"]
    for users, row in by_load.items():  # a closed loop: users = rate x time in the system
        in_system = row["requests_per_s"] * row["e2e_p90_ms"] / 1000
        assert in_system == pytest.approx(users, rel=0.06), row
    unknown = SPEC.model_copy(update={"model": SPEC.model.model_copy(update={"source": "x/y"})})
    assert predict(unknown, parse_profile({}), replicas=1) == []


def test_compare_lines_points_up_by_load() -> None:
    a = [parse_export(EXPORT, LoadPoint("concurrency", 4), output_tokens=32).as_dict()]
    faster = {**EXPORT, "request_throughput": {"avg": 112.72}}
    b = [
        parse_export(faster, LoadPoint("concurrency", 4), output_tokens=32).as_dict(),
        parse_export(EXPORT, LoadPoint("concurrency", 8), output_tokens=32).as_dict(),
    ]
    (row,) = compare(a, b)
    assert row["metrics"]["requests_per_s"]["pct"] == 100.0
    assert row["metrics"]["ttft_p90_ms"]["delta"] == 0.0
