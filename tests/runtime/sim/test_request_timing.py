"""The engine's own part of a request's TTFT: SGLang's timing stats and its metrics file.

In-process engines on the fast clock (simulated time is the sum of step durations); the timing
asserted is simulated, never real.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from runtime.sim.args import StartupError, check_engine_args, parse_engine_args
from runtime.sim.faults import FaultInjector
from runtime.sim.generation import RequestRun, ServingContext, meta_timing
from runtime.sim.request import GenerationParams, SimRequest
from tests.aio import run_async
from tests.runtime.sim.test_engine_loop import make_engine, prompt_of


async def _two_at_once(ctx: ServingContext) -> tuple[SimRequest, SimRequest]:
    """A long request and a short one sent together to an engine that runs one at a time."""
    engine = ctx.engine
    loop_task = asyncio.create_task(engine.run())
    params = GenerationParams(max_new_tokens=8, ignore_eos=True)
    try:
        runs = [
            RequestRun(ctx, engine.new_request(prompt_of(n, n), params, stream=True))
            for n in (3000, 1000)
        ]
        for run in runs:
            await run.collect()
            run.close()
    finally:
        loop_task.cancel()
    return runs[0].req, runs[1].req


def _context(*flags: str) -> ServingContext:
    engine = make_engine("--max-running-requests", "1", "--disable-radix-cache", *flags)
    return ServingContext(engine.args, engine, FaultInjector(engine.args.sim), accepting=True)


def test_queue_time_and_prefill_latency_add_up_to_the_engines_ttft() -> None:
    first, second = run_async(_two_at_once(_context()))
    timing = meta_timing(second)
    assert first.last_token_at is not None and second.first_token_at is not None
    # The second waited for the whole first request, then ran its own prefill alone.
    assert timing["queue_time"] == pytest.approx(first.last_token_at - second.arrival, abs=1e-6)
    engine_ttft = second.first_token_at - second.arrival
    assert timing["queue_time"] + timing["prefill_launch_latency"] == pytest.approx(
        engine_ttft, abs=2e-6
    )
    assert meta_timing(first)["queue_time"] == pytest.approx(0.0, abs=1e-6)


def test_export_metrics_to_file_writes_a_line_per_request(tmp_path: Path) -> None:
    ctx = _context("--export-metrics-to-file", "--export-metrics-to-file-dir", str(tmp_path))
    first, second = run_async(_two_at_once(ctx))
    assert ctx.metrics_file is not None
    ctx.metrics_file.close()
    (log,) = tmp_path.glob("sglang-request-metrics-*.log")
    records = {r["id"]: r for r in map(json.loads, log.read_text().splitlines())}
    assert set(records) == {first.rid, second.rid}
    record = records[second.rid]
    assert record["completion_tokens"] == 8 and record["prompt_tokens"] == 1000
    assert record["queue_time"] == meta_timing(second)["queue_time"] > 0
    assert json.loads(record["request_parameters"])["rid"] == second.rid


def test_export_metrics_to_file_needs_its_directory() -> None:
    args = parse_engine_args(["--model-path", "sim/x", "--export-metrics-to-file"])
    with pytest.raises(StartupError, match="--export-metrics-to-file-dir is required"):
        check_engine_args(args)


def test_the_queue_time_metric_counts_the_wait_not_the_prefill() -> None:
    """``sglang:queue_time_seconds`` ends where the prefill starts, as meta_info's queue_time."""
    first, second = run_async(_two_at_once(ctx := _context()))
    labels = ctx.engine.metrics.scheduler_labels
    total = ctx.engine.metrics.registry.get_sample_value("sglang:queue_time_seconds_sum", labels)
    waited = meta_timing(first)["queue_time"] + meta_timing(second)["queue_time"]
    assert total == pytest.approx(waited, abs=1e-6)
