"""/api/v1/deployments/{id}/benchmarks: queue, list, read, compare; refusals name the field.

No AIPerf runs here (tests/experiments/benchmark/test_end_to_end.py runs it for real): a queued
benchmark is what these routes answer about, and finished ones are left as their run would leave
them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane import services as platform
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.benchmark.run import RUN_LIMIT_S
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import Benchmark, BenchmarkStatus
from deployments.traffic.models import UsageRecord
from tests.api.conftest import SPEC, Clients, error_of, fields_of, spec_with
from tests.conftest import Cast
from tests.experiments.canary.helpers import mark_serving

BENCH = "deployments/chat/benchmarks"
FP8 = spec_with(quantization={"method": "fp8"})


@pytest.fixture
def serving(cast: Cast) -> Deployment:
    actor = cast.actor(cast.dave, cast.acme)
    return mark_serving(services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC))


def _queue(api: Clients, **profile: Any) -> Any:
    return api.dave.post(BENCH, {"name": "sweep", "profile": {"duration_s": 5, **profile}})


def _finish(benchmark_id: str, results: list[dict[str, Any]]) -> None:
    Benchmark.objects.filter(pk=benchmark_id).update(
        status=BenchmarkStatus.SUCCEEDED, results=results
    )


def _point(concurrency: int, ttft_p90: float, tokens_per_s: float) -> dict[str, Any]:
    latency = {"p50": ttft_p90 / 2, "p90": ttft_p90, "p99": ttft_p90 * 2}
    return {
        "kind": "concurrency",
        "value": concurrency,
        "requests": 100,
        "errors": 0,
        "duration_s": 5.0,
        "output_tokens_per_s": tokens_per_s,
        "requests_per_s": 10.0,
        "input_tokens_mean": 500.0,
        "output_tokens_mean": 128.0,
        "latency_ms": {"ttft": latency, "itl": latency, "e2e": latency},
        "error_summary": [],
    }


def test_a_developer_queues_a_benchmark_with_the_optimizers_prediction(
    api: Clients, serving: Deployment
) -> None:
    answer = _queue(api, concurrency=[1, 8], input_tokens=256, output_tokens=64)
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert body["status"] == "queued" and body["revision"] == 1 and body["results"] == []
    assert body["profile"]["concurrency"] == [1, 8] and body["profile"]["input_tokens"] == 256
    predicted = {p["value"]: p for p in body["prediction"]}
    assert set(predicted) == {1, 8}
    assert predicted[1]["ttft_p90_ms"] > 0 and predicted[1]["itl_p90_ms"] > 0
    assert predicted[8]["output_tokens_per_s"] > predicted[1]["output_tokens_per_s"]
    listed = api.carol.get(BENCH).json()
    assert [b["id"] for b in listed] == [body["id"]]
    assert api.carol.get(f"{BENCH}/{body['id']}").json()["name"] == "sweep"
    event = serving.events.get(reason="BenchmarkQueued")
    assert event.data["benchmark"] == body["id"]


def test_bad_profiles_are_refused_by_field(api: Clients, serving: Deployment) -> None:
    assert fields_of(_queue(api, concurrency=[0])) == ["profile.concurrency"]
    assert fields_of(_queue(api, concurrency=[1, 1])) == ["profile.concurrency"]
    assert fields_of(_queue(api, concurrency=[1], request_rate=2)) == ["profile.concurrency"]
    assert fields_of(_queue(api, shared_prefix=0.99)) == ["profile.shared_prefix"]
    assert fields_of(_queue(api, duration_s=3000, concurrency=[1, 2])) == ["profile.duration_s"]
    refused = _queue(api, input_tokens="many")
    assert refused.status_code == 422 and "input_tokens" in str(error_of(refused))
    assert api.dave.post(BENCH, {"revision": 9}).status_code == 422
    assert api.carol.post(BENCH, {}).status_code == 403
    assert api.bob.post(BENCH, {}).status_code == 404
    assert Benchmark.objects.count() == 0


def test_one_benchmark_at_a_time_and_only_on_a_serving_endpoint(
    api: Clients, cast: Cast, serving: Deployment
) -> None:
    assert _queue(api, request_rate=2.5).status_code == 201
    assert error_of(_queue(api))["code"] == "benchmark_running"
    actor = cast.actor(cast.dave, cast.acme)
    services.create_deployment(actor, slug="cold", name="Cold", spec=SPEC)
    cold = api.dave.post("deployments/cold/benchmarks", {})
    assert cold.status_code == 409 and error_of(cold)["code"] == "not_serving"


def test_two_benchmarks_compare_point_by_point(api: Clients, serving: Deployment) -> None:
    first = _queue(api, concurrency=[1, 4]).json()["id"]
    _finish(first, [_point(1, 20.0, 100.0), _point(4, 40.0, 300.0)])
    second = _queue(api, concurrency=[4, 16]).json()["id"]
    _finish(second, [_point(4, 30.0, 360.0), _point(16, 90.0, 800.0)])
    answer = api.carol.get(f"{BENCH}/compare?a={first}&b={second}")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["a"]["id"] == first and body["b"]["id"] == second
    (point,) = body["points"]  # only concurrency 4 ran in both
    assert point["value"] == 4
    ttft = point["metrics"]["ttft_p90_ms"]
    assert (ttft["a"], ttft["b"], ttft["delta"], ttft["pct"]) == (40.0, 30.0, -10.0, -25.0)
    assert point["metrics"]["output_tokens_per_s"]["pct"] == 20.0
    assert api.carol.get(f"{BENCH}/compare?a={first}&b=nope").status_code == 404
    assert api.bob.get(f"{BENCH}/compare?a={first}&b={second}").status_code == 404


def test_usage_of_a_benchmark_key_is_labelled_benchmark(
    api: Clients, cast: Cast, serving: Deployment
) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    plain = platform.create_api_key(owner, name="app", kind="inference").api_key
    bench_key = platform.create_api_key(owner, name="benchmark x", kind="inference").api_key
    benchmark_id = _queue(api).json()["id"]
    Benchmark.objects.filter(pk=benchmark_id).update(api_key=bench_key)
    minute = serving.created_at.replace(second=0, microsecond=0)
    for key in (plain, bench_key):
        UsageRecord.objects.create(
            organization=cast.acme, api_key=key, deployment_id=serving.pk,
            deployment_slug="chat", minute=minute, requests=3, prompt_tokens=30,
        )  # fmt: skip
    rows = api.carol.get("deployments/chat/usage").json()["rows"]
    assert {r["api_key_name"]: r["purpose"] for r in rows} == {
        "app": "inference",
        "benchmark x": "benchmark",
    }


def test_a_benchmark_may_target_a_running_canarys_revision(
    api: Clients, cast: Cast, serving: Deployment
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    canary_services.start_canary(actor, serving.pk, spec=FP8, weight=20)
    answer = api.dave.post(BENCH, {"revision": 2, "profile": {"duration_s": 5}})
    assert answer.status_code == 201, answer.content
    assert answer.json()["revision"] == 2
    refused = api.dave.post(BENCH, {"revision": 3})
    assert refused.status_code == 422 and fields_of(refused) == ["revision"]


def test_a_lost_run_does_not_block_the_next_one(api: Clients, serving: Deployment) -> None:
    lost = _queue(api).json()["id"]
    long_ago = timezone.now() - timedelta(seconds=RUN_LIMIT_S + 120)
    Benchmark.objects.filter(pk=lost).update(
        status=BenchmarkStatus.RUNNING, created_at=long_ago, started_at=long_ago
    )
    assert _queue(api).status_code == 201
    gone = Benchmark.objects.get(pk=lost)
    assert gone.status == BenchmarkStatus.FAILED and "lost" in gone.error
    assert serving.events.filter(reason="BenchmarkLost").exists()
