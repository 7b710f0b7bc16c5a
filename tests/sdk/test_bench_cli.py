"""``plinth bench run|list|show|compare`` with the installed command against a running Plinth,
and the SDK's ``benchmarks`` resource underneath it. No AIPerf runs here: finished benchmarks
are left as their run would leave them (tests/experiments/benchmark/test_end_to_end.py runs it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from deployments.endpoints import services
from deployments.experiments.models import Benchmark, BenchmarkStatus
from tests.conftest import Cast
from tests.experiments.canary.helpers import BF16, mark_serving
from tests.fixtures.sdk import SdkEnv
from tests.sdk.test_cli import Cli

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process


def _point(value: int, ttft_p90: float) -> dict[str, Any]:
    lat = {"p50": ttft_p90 / 2, "p90": ttft_p90, "p99": ttft_p90 * 2}
    return {
        "kind": "concurrency", "value": value, "requests": 40, "errors": 0, "duration_s": 5.0,
        "output_tokens_per_s": 90.0, "requests_per_s": 4.0, "input_tokens_mean": 100.0,
        "output_tokens_mean": 20.0, "latency_ms": {"ttft": lat, "itl": lat, "e2e": lat},
        "error_summary": [],
    }  # fmt: skip


def test_benchmarks_from_the_command_line(
    sdk_env: SdkEnv, server: str, admin_key: str, cast: Cast, tmp_path: Path
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    mark_serving(services.create_deployment(actor, slug="cli-bench", name="B", spec=BF16))
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")

    out = plinth("bench", "run", "cli-bench", "-c", "1,4", "--isl", "200", "--duration", "5")
    assert "status: queued" in out, out
    first = Benchmark.objects.get()
    assert first.profile["concurrency"] == [1, 4] and first.profile["input_tokens"] == 200
    plinth("bench", "run", "cli-bench", "-c", "2", code=4)  # one at a time: a conflict
    short = {**_point(1, 20.0), "output_tokens_requested": 24, "output_tokens_min": 3.0}
    short.update(empty_answers=3, notes=["3 answers had no text"])
    Benchmark.objects.filter(pk=first.pk).update(
        status=BenchmarkStatus.SUCCEEDED, results=[short, _point(4, 40.0)]
    )
    plinth("bench", "run", "cli-bench", "-c", "0", code=5)  # refused input names the field
    plinth("bench", "run", "cli-bench", "-c", "4", "--name", "second")
    second = Benchmark.objects.get(name="second")
    Benchmark.objects.filter(pk=second.pk).update(
        status=BenchmarkStatus.SUCCEEDED, results=[_point(4, 30.0)]
    )

    listed = json.loads(plinth("bench", "list", "cli-bench", "-o", "json"))
    assert [b["name"] for b in listed] == ["second", ""]
    shown = plinth("bench", "show", "cli-bench", str(first.pk))
    assert "TTFT_P90_PRED" in shown and "concurrency=4" in shown, shown
    # The answer length asked for beside the measured ones, and what to know about them.
    assert "OUT_TOK_ASKED" in shown and "OUT_TOK_MIN" in shown and "EMPTY" in shown, shown
    assert "concurrency=1: 3 answers had no text" in shown, shown
    compared = plinth("bench", "compare", "cli-bench", str(first.pk), str(second.pk))
    assert "ttft_p90_ms" in compared and "-25.0%" in compared, compared
