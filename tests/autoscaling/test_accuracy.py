"""The performance model against the endpoint's own traffic (``model_accuracy``): predicted and
measured TTFT/ITL p90 at the measured load, the correction in force (the SLO autoscaler's, or
fitted from the samples without it), an error band, and throughput from a benchmark."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
from django.utils import timezone

from deployments.autoscaling import services as autoscaler
from deployments.autoscaling import tasks as scaling
from deployments.autoscaling.correction import Correction
from deployments.autoscaling.queries import model_accuracy
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.models import Benchmark, BenchmarkStatus
from deployments.traffic.models import MetricSample
from runtime.capacity import Workload, replica_model
from runtime.spec import RuntimeSpec
from tests.conftest import Cast
from tests.fixtures.measured import (
    MODEL,
    PLAIN,
    SLO_POLICY,
    measure,
    model_of,
    serving_endpoint,
)


def test_without_an_slo_policy_the_correction_is_fitted_from_the_samples(cast: Cast) -> None:
    chat = serving_endpoint(cast, "chat")
    model = model_of(chat)
    rate = 0.5 * model.capacity_rps(0.5, 0.04)
    now = timezone.now()
    measure(chat, ttft=[1.1] * 10, itl=[1.2] * 10, rate_per_replica=rate, end=now)

    accuracy = model_accuracy(chat, now)

    assert accuracy is not None and accuracy.modelled
    assert accuracy.revision == chat.current_revision.number  # type: ignore[union-attr]
    by = {f.metric: f for f in accuracy.figures}
    assert set(by) == {"ttft", "itl"}
    assert by["itl"].source == by["ttft"].source == "samples"
    assert by["ttft"].correction == pytest.approx(1.1)
    assert by["itl"].correction == pytest.approx(1.2)
    assert by["itl"].predicted == pytest.approx(model.predict(rate).itl_s)
    assert by["itl"].measured == pytest.approx(1.2 * model.predict(rate).itl_s)
    assert by["itl"].samples == 10
    assert accuracy.correction == pytest.approx({"ttft": 1.1, "itl": 1.2})
    assert accuracy.rate_rps_per_replica == pytest.approx(rate)
    assert "model corrected +20%" in by["itl"].summary
    assert by["itl"].summary.startswith("predicted ")


def test_the_band_is_the_spread_of_the_per_sample_ratios_without_a_lone_outlier(
    cast: Cast,
) -> None:
    chat = serving_endpoint(cast, "chat")
    rate = 0.5 * model_of(chat).capacity_rps(0.5, 0.04)
    now = timezone.now()
    itl = [1.0, 1.05, 1.1, 1.15, 1.2, 1.0, 1.05, 1.1, 1.15, 1.2, 3.0]
    measure(chat, ttft=[1.0] * len(itl), itl=itl, rate_per_replica=rate, end=now)

    [_, figure] = model_accuracy(chat, now).figures  # type: ignore[union-attr]

    assert figure.metric == "itl"
    assert figure.band == pytest.approx((1.0, 1.2))
    assert figure.band_percent == (0, 20)


def test_with_the_slo_policy_the_correction_in_force_is_the_autoscalers(cast: Cast) -> None:
    chat = serving_endpoint(cast, "chat", SLO_POLICY)
    revision = chat.current_revision
    assert revision is not None
    rate = 0.75 * model_of(chat).capacity_rps(0.5, 0.04)
    now = timezone.now()
    measure(chat, ttft=[0.5] * 10, itl=[0.5] * 10, rate_per_replica=rate, end=now)
    # The autoscaler stepped its correction down once (bounded), from a fit of 0.5.
    step = Correction("engine", {}, {"itl": 0.8}, {"itl": 0.5})
    autoscaler.record_model_correction(chat.pk, revision.number, step, {})

    [itl] = [f for f in model_accuracy(chat, now).figures if f.metric == "itl"]  # type: ignore[union-attr]

    assert (itl.source, itl.correction) == ("autoscaler", 0.8)
    assert itl.fitted == pytest.approx(0.5)
    assert "model corrected -20%" in itl.summary


def test_a_correction_of_another_revision_is_not_in_force(cast: Cast) -> None:
    chat = serving_endpoint(cast, "chat", SLO_POLICY)
    revision = chat.current_revision
    assert revision is not None
    rate = 0.75 * model_of(chat).capacity_rps(0.5, 0.04)
    now = timezone.now()
    measure(chat, ttft=[1.0] * 4, itl=[1.3] * 4, rate_per_replica=rate, end=now)
    step = Correction("engine", {}, {"itl": 2.0}, {"itl": 2.0})
    autoscaler.record_model_correction(chat.pk, revision.number + 1, step, {})

    [itl] = [f for f in model_accuracy(chat, now).figures if f.metric == "itl"]  # type: ignore[union-attr]

    assert (itl.source, itl.correction) == ("autoscaler", 1.0)


def test_samples_before_the_window_say_nothing(cast: Cast) -> None:
    chat = serving_endpoint(cast, "chat")
    rate = 0.5 * model_of(chat).capacity_rps(0.5, 0.04)
    now = timezone.now()
    # The look-back is the window + scale-down delay: 180 s.
    measure(
        chat, ttft=[2.0] * 4, itl=[2.0] * 4, rate_per_replica=rate, end=now - timedelta(hours=1)
    )

    accuracy = model_accuracy(chat, now)

    assert accuracy is not None and accuracy.window_s == 180
    assert accuracy.figures == [] and accuracy.correction == {}


def test_throughput_comes_from_the_revisions_latest_benchmark(cast: Cast) -> None:
    chat = serving_endpoint(cast, "chat")
    assert chat.current_revision is not None
    now = timezone.now()
    points = [("concurrency", 1, 100.0, 90.0), ("concurrency", 8, 700.0, 630.0)]
    Benchmark.objects.create(
        deployment=chat, revision=chat.current_revision, profile={},
        status=BenchmarkStatus.SUCCEEDED, finished_at=now,
        results=[{"kind": k, "value": v, "output_tokens_per_s": m} for k, v, _, m in points],
        prediction=[{"kind": k, "value": v, "output_tokens_per_s": p} for k, v, p, _ in points],
    )  # fmt: skip

    [throughput] = model_accuracy(chat, now).figures  # type: ignore[union-attr]

    assert throughput.metric == "throughput" and throughput.source == "benchmark"
    assert (throughput.predicted, throughput.measured) == (700.0, 630.0)
    assert throughput.correction == pytest.approx(0.9)
    assert "630 tok/s" in throughput.summary
    # Throughput is shown, never applied to the latency model.
    assert model_accuracy(chat, now).correction == {}  # type: ignore[union-attr]


def test_nothing_while_no_revision_serves(cast: Cast) -> None:
    chat = serving_endpoint(cast, "chat")
    Deployment.objects.filter(pk=chat.pk).update(current_revision=None)
    chat.refresh_from_db()

    assert model_accuracy(chat, timezone.now()) is None


def test_the_correction_shown_is_the_one_the_autoscaler_applied_on_its_pass(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    """One correction: what the read reports in force is what the SLO policy's pass fitted,
    recorded and sized replicas with."""
    chat = serving_endpoint(cast, "chat", SLO_POLICY)
    rate = 0.75 * model_of(chat).capacity_rps(0.5, 0.04)
    now = timezone.now()
    measure(chat, ttft=[1.0] * 12, itl=[1.5] * 12, rate_per_replica=rate, end=now)
    with django_capture_on_commit_callbacks(execute=True):
        scaling.autoscale(now=now.isoformat())
    corrected = chat.events.get(reason="ModelCorrected")
    applied = corrected.data["inputs"]["correction"]["itl"]
    assert applied == pytest.approx(1.5, rel=1e-3)

    [itl] = [f for f in model_accuracy(chat, now).figures if f.metric == "itl"]  # type: ignore[union-attr]

    assert (itl.source, itl.correction) == ("autoscaler", corrected.data["correction"]["itl"])
    assert itl.correction == pytest.approx(applied, rel=1e-3)


def test_a_split_endpoint_compares_ttft_on_its_prefill_pool_and_itl_on_its_decode_pool(
    cast: Cast,
) -> None:
    spec = {"model": {"source": MODEL}, "hardware": {"gpu": "H100-SXM"},
            "disaggregation": {"enabled": True}, "autoscaling": PLAIN}  # fmt: skip
    made = services.create_deployment(
        cast.actor(cast.dave, cast.acme), slug="split", name="split", spec=spec, replicas=1
    )
    Deployment.objects.filter(pk=made.pk).update(
        current_revision=made.target_revision, ready_replicas=1, total_replicas=2
    )
    split = Deployment.objects.get(pk=made.pk)
    parsed = RuntimeSpec.model_validate(spec)
    prefill, decode = (replica_model(parsed, role, Workload()) for role in ("prefill", "decode"))
    assert prefill is not None and decode is not None
    rate, now = 1.0, timezone.now()
    MetricSample.objects.bulk_create(
        MetricSample(
            deployment=split, ts=now - timedelta(seconds=15 * i), interval_s=15,
            replicas_ready=2, requests_per_s=rate, ttft_p90=9.0, itl_p90=9.0,
            replicas=[
                {"name": "p-0", "role": "prefill", "requests_per_s": rate,
                 "ttft_p90": 1.2 * prefill.predict(rate).ttft_s},
                {"name": "d-0", "role": "decode", "requests_per_s": rate,
                 "itl_p90": 0.9 * decode.predict(rate).itl_s},
            ],
        )
        for i in range(5)
    )  # fmt: skip

    accuracy = model_accuracy(split, now)

    assert accuracy is not None
    assert accuracy.correction == pytest.approx({"ttft": 1.2, "itl": 0.9})


def test_while_two_revisions_serve_each_is_compared_on_its_own_figures(cast: Cast) -> None:
    chat = serving_endpoint(cast, "chat")
    assert chat.current_revision is not None
    spec = {**chat.current_revision.spec, "routing": {"policy": "round_robin"}}
    canary = services.update_settings(
        cast.actor(cast.dave, cast.acme), chat.pk, spec=spec, base_revision=1
    )
    chat = Deployment.objects.get(pk=chat.pk)  # r1 still serves; r2 runs beside it
    models = {n: replica_model(RuntimeSpec.model_validate(r.spec), "engine", Workload())
              for n, r in ((1, chat.current_revision), (2, canary))}  # fmt: skip
    rate, now = 1.0, timezone.now()
    factors = {1: 1.1, 2: 1.6}

    def figures(number: int) -> dict[str, float]:
        model = models[number]
        assert model is not None
        at = model.predict(rate)
        factor = factors[number]
        return {"requests": 15.0, "requests_per_s": rate,
                "ttft_p90": factor * at.ttft_s, "itl_p90": factor * at.itl_s}  # fmt: skip

    MetricSample.objects.bulk_create(
        MetricSample(
            deployment=chat, ts=now - timedelta(seconds=15 * i), interval_s=15,
            replicas_ready=2, requests_per_s=2 * rate, ttft_p90=9.0, itl_p90=9.0,
            replicas=[{"name": "a", "revision": 1}, {"name": "b", "revision": 2}],
            revisions={"1": figures(1), "2": figures(2)},
        )
        for i in range(5)
    )  # fmt: skip

    serving = model_accuracy(chat, now)
    beside = model_accuracy(chat, now, canary)

    assert serving is not None and beside is not None
    assert (serving.revision, beside.revision) == (1, 2)
    assert serving.correction == pytest.approx({"ttft": 1.1, "itl": 1.1})
    assert beside.correction == pytest.approx({"ttft": 1.6, "itl": 1.6})
    assert serving.rate_rps_per_replica == pytest.approx(rate)
