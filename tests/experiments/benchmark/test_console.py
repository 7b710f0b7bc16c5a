"""The Benchmarks tab: queue one from the form, follow it, read its results beside the
prediction (table and chart), compare two. No AIPerf runs here (see test_end_to_end.py)."""

from __future__ import annotations

import html
import json
from typing import Any

from django.utils import timezone

from controlplane import services as platform
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.models import Benchmark, BenchmarkStatus
from deployments.traffic.models import UsageRecord
from tests.conftest import Cast
from tests.console.conftest import signed_in
from tests.experiments.canary.helpers import BF16, mark_serving


def _serving(cast: Cast) -> Deployment:
    actor = cast.actor(cast.dave, cast.acme)
    return mark_serving(services.create_deployment(actor, slug="chat", name="Chat", spec=BF16))


def _point(value: int, ttft: float) -> dict[str, Any]:
    lat = {"p50": ttft / 2, "p90": ttft, "p99": ttft * 2}
    return {
        "kind": "concurrency", "value": value, "requests": 50, "errors": 1, "duration_s": 5.0,
        "output_tokens_per_s": 100.0 * value, "requests_per_s": 5.0, "input_tokens_mean": 90.0,
        "output_tokens_mean": 24.0, "latency_ms": {"ttft": lat, "itl": lat, "e2e": lat},
        "error_summary": [],
    }  # fmt: skip


def test_a_developer_queues_a_benchmark_and_reads_its_results(cast: Cast) -> None:
    _serving(cast)
    dave = signed_in(cast.dave)
    page = dave.get("/endpoints/chat/benchmarks/").content.decode()
    assert "Run a benchmark" in page and "No benchmarks yet." in page
    queued = dave.post(
        "/endpoints/chat/benchmarks/",
        {"concurrency": "1, 4", "input_tokens": "256", "duration_s": "5", "name": "first"},
    )
    benchmark = Benchmark.objects.get()
    assert queued.status_code == 302 and str(benchmark.pk) in queued["Location"]
    assert benchmark.profile["concurrency"] == [1, 4] and benchmark.profile["input_tokens"] == 256
    detail = f"/endpoints/chat/benchmarks/{benchmark.pk}/"
    page = dave.get(detail).content.decode()
    assert "results appear point by point" in page and "hx-trigger" in page
    Benchmark.objects.filter(pk=benchmark.pk).update(
        status=BenchmarkStatus.SUCCEEDED, results=[_point(1, 20.0), _point(4, 35.0)]
    )
    polled = dave.get(detail, headers={"HX-Request": "true"})
    assert polled.status_code == 286  # finished: htmx stops polling
    page = dave.get(detail).content.decode()
    assert "c=4" in page and "35.0" in page and "hx-trigger" not in page
    chart = json.loads(html.unescape(page.split('data-chart="', 1)[1].split('"', 1)[0]))
    labels = [s["label"] for s in chart["series"]]
    assert labels == ["measured p50", "measured p90", "predicted p90"]


def test_the_results_show_the_asked_and_measured_answer_lengths_and_empty_answers(
    cast: Cast,
) -> None:
    _serving(cast)
    dave = signed_in(cast.dave)
    dave.post("/endpoints/chat/benchmarks/", {"concurrency": "4", "output_tokens": "24"})
    benchmark = Benchmark.objects.get()
    notes = ["6 of 50 answers were not the 24 output tokens asked for", "2 answers had no text"]
    lengths = {"output_tokens_requested": 24, "output_tokens_mean": 21.5, "output_tokens_min": 3}
    short = {**_point(4, 20.0), **lengths, "off_length_answers": 6, "empty_answers": 2}
    short["notes"] = notes
    Benchmark.objects.filter(pk=benchmark.pk).update(
        status=BenchmarkStatus.SUCCEEDED, results=[short]
    )
    page = dave.get(f"/endpoints/chat/benchmarks/{benchmark.pk}/").content.decode()
    assert "Output tokens asked / mean / min" in page and "Empty answers" in page
    assert '<td class="warning">24 / 21.5 / 3</td>' in page
    assert "c=4: 6 of 50 answers were not the 24 output tokens asked for" in page
    assert "c=4: 2 answers had no text" in page


def test_two_benchmarks_compare_and_refusals_are_shown(cast: Cast) -> None:
    _serving(cast)
    dave = signed_in(cast.dave)
    answer = dave.post("/endpoints/chat/benchmarks/", {"concurrency": "0"}, follow=True)
    assert "concurrency must be between 1 and 4096" in answer.content.decode()
    ids = []
    for ttft in (20.0, 10.0):
        dave.post("/endpoints/chat/benchmarks/", {"concurrency": "4", "duration_s": "5"})
        latest = Benchmark.objects.order_by("-created_at").first()
        assert latest is not None
        Benchmark.objects.filter(pk=latest.pk).update(
            status=BenchmarkStatus.SUCCEEDED, results=[_point(4, ttft)]
        )
        ids.append(str(latest.pk))
    page = dave.get(f"/endpoints/chat/benchmarks/compare/?a={ids[0]}&b={ids[1]}").content.decode()
    assert "ttft_p90_ms" in page and "-10.00 (-50.0%)" in page
    carol = signed_in(cast.carol)  # a viewer reads, and has no form
    listing = carol.get("/endpoints/chat/benchmarks/").content.decode()
    assert "Run a benchmark" not in listing and "Compare" in listing
    assert carol.post("/endpoints/chat/benchmarks/", {"concurrency": "1"}).status_code == 403
    assert Benchmark.objects.count() == 2


def test_the_usage_page_labels_a_benchmarks_traffic(cast: Cast) -> None:
    endpoint = _serving(cast)
    owner = cast.actor(cast.alice, cast.acme)
    app_key = platform.create_api_key(owner, name="app key", kind="inference").api_key
    bench_key = platform.create_api_key(owner, name="bench key", kind="inference").api_key
    dave = signed_in(cast.dave)
    dave.post("/endpoints/chat/benchmarks/", {"concurrency": "1", "duration_s": "5"})
    Benchmark.objects.update(api_key=bench_key)
    minute = timezone.now().replace(second=0, microsecond=0)
    for key in (app_key, bench_key):
        UsageRecord.objects.create(
            organization=cast.acme, api_key=key, deployment_id=endpoint.pk,
            deployment_slug="chat", minute=minute, requests=2, completion_tokens=5,
        )  # fmt: skip
    page = dave.get("/usage/").content.decode()
    rows = {r.split("</td>", 1)[0] for r in page.split("<tr><td>")[1:]}
    assert any("bench key" in r and ">benchmark<" in r for r in rows), rows
    assert any("app key" in r and ">benchmark<" not in r for r in rows), rows
