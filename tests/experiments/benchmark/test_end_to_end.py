"""A benchmark end to end on the local cluster, with NVIDIA AIPerf for real.

Real parts: PostgreSQL, Redis, a Celery worker and beat (which deploy the endpoint and run the
benchmark task), simulated engines and smg as processes, a gateway process in front, and AIPerf
0.13 from the tools environment ``make test`` installs (``deployments.drivers.local.tools_env``).
The test queues a two-point concurrency sweep through the API and checks what a user would: the
results are stored per point and hang together, the run's temporary key was limited to the endpoint
and is revoked, every answer was as long as the profile asked (and both lengths are reported), the
timeline and audit log tell the story, and the traffic shows in usage labelled ``benchmark``.
With a canary running, a benchmark of each revision reaches only that revision (its requests
carry the gateway's ``X-Plinth-Revision`` pin). No figure is compared with a timing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from controlplane import services as platform
from controlplane.models import AuditEvent
from deployments.drivers.local.tools_env import aiperf_installed
from deployments.endpoints.models import Deployment
from deployments.experiments.models import Benchmark, BenchmarkStatus
from deployments.status import ACTIVE
from deployments.traffic.usage import flush_usage
from tests.conftest import Cast
from tests.endpoints import processes
from tests.fixtures.endpoints import refresh, small_spec, stop_everything
from tests.gateway.conftest import GatewayProcess, start_gateway, stop_process
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
PROFILE = {"concurrency": [1, 4], "duration_s": 4, "input_tokens": 96, "output_tokens": 24}


class Stack:
    def __init__(self, key: str, gateway: GatewayProcess) -> None:
        self.key = key
        self.gateway = gateway

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        client = Client(HTTP_AUTHORIZATION=f"Bearer {self.key}")
        if method == "get":
            response = client.get(f"/api/v1{path}")
        else:
            response = client.post(
                f"/api/v1{path}", data=json.dumps(body or {}), content_type="application/json"
            )
        assert response.status_code < 300, response.content
        return response.json()


@pytest.fixture
def stack(cast: Cast, tmp_path: Path, queue: str) -> Iterator[Stack]:
    assert aiperf_installed(settings.PLINTH_TOOLS_DIR), (
        "run `python -m deployments.drivers.local.tools_env`"
    )
    gateway = start_gateway(tmp_path, GATEWAY_REFRESH_SECONDS="30")
    run_dir = tmp_path / "local"
    env = processes.engine_env(
        run_dir,
        queue,
        GATEWAY_PUBLIC_URL=gateway.url,
        PLINTH_TOOLS_DIR=str(settings.PLINTH_TOOLS_DIR),
    )
    key = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="bench e2e", kind="management", role="developer"
    ).plaintext
    worker = processes.start("worker", env, tmp_path / "worker.log")
    beat = processes.start("beat", env, tmp_path / "beat.log")
    try:
        yield Stack(key, gateway)
    finally:
        processes.stop(beat)
        processes.stop(worker)
        stop_process(gateway.popen)
        stop_everything(run_dir)


def test_a_benchmark_runs_aiperf_through_the_gateway_and_stores_its_sweep(stack: Stack) -> None:
    created = stack.api("post", "/deployments", {"slug": "bench", "spec": small_spec()})
    deployment = Deployment.objects.get(pk=created["id"])
    wait_until(lambda: refresh(deployment).status == ACTIVE, "the endpoint active", timeout=120)

    queued = stack.api("post", "/deployments/bench/benchmarks", {"profile": PROFILE})
    assert queued["status"] == "queued" and len(queued["prediction"]) == 2

    def finished() -> bool:
        return Benchmark.objects.get(pk=queued["id"]).status in (
            BenchmarkStatus.SUCCEEDED,
            BenchmarkStatus.FAILED,
        )

    wait_until(finished, "the benchmark finished", timeout=480, interval=2)
    body = stack.api("get", f"/deployments/bench/benchmarks/{queued['id']}")
    assert body["status"] == "succeeded", body["error"]
    assert body["runner"] == "local" and body["tool"] == "aiperf 0.13.0"
    assert body["served_revisions"] == [1]
    assert [p["value"] for p in body["results"]] == [1, 4]
    for point in body["results"]:
        # Every answer is as long as asked (pinned with ignore_eos and min_tokens, which the
        # simulator honours as SGLang does), and the point shows the asked and measured lengths.
        assert point["output_tokens_mean"] == PROFILE["output_tokens"], point
        assert point["output_tokens_min"] == point["output_tokens_requested"] == 24
        assert point["off_length_answers"] == point["empty_answers"] == 0 and point["notes"] == []
        assert point["requests"] > 0 and point["errors"] == 0, point["error_summary"]
        assert point["output_tokens_per_s"] > 0 and point["requests_per_s"] > 0
        assert point["input_tokens_mean"] > PROFILE["input_tokens"] / 3
        for metric in ("ttft", "itl", "e2e"):
            figures = point["latency_ms"][metric]
            assert 0 <= figures["p50"] <= figures["p90"] <= figures["p99"], (metric, figures)
        assert point["latency_ms"]["e2e"]["p50"] >= point["latency_ms"]["ttft"]["p50"]

    # The run's key: limited to this endpoint, temporary, revoked when the run ended.
    benchmark = Benchmark.objects.select_related("api_key").get(pk=queued["id"])
    key = benchmark.api_key
    assert key is not None and key.allowed_deployment_ids == [deployment.pk]
    assert key.is_temporary and key.revoked_at is not None

    reasons = set(deployment.events.values_list("reason", flat=True))
    assert {"BenchmarkQueued", "BenchmarkStarted", "BenchmarkSucceeded"} <= reasons
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"benchmark.create", "benchmark.finish"} <= actions

    # Its traffic is metered like any other, and labelled as a benchmark's.
    def metered() -> bool:
        flush_usage(include_current=True)
        rows = stack.api("get", "/deployments/bench/usage")["rows"]
        return any(r["purpose"] == "benchmark" for r in rows)

    wait_until(metered, "the benchmark's usage flushed", timeout=30, interval=1)
    rows = stack.api("get", "/deployments/bench/usage")["rows"]
    (row,) = [r for r in rows if r["purpose"] == "benchmark"]
    assert row["api_key_id"] == str(key.pk)
    assert row["requests"] >= sum(p["requests"] for p in body["results"])
    assert row["completion_tokens"] > 0


# Benchmarking each revision of a running canary (every request pinned to its revision) is
# covered by tests/experiments/quality/test_end_to_end.py, which benchmarks both sides of a gated
# canary.
