"""The quality loop on the local cluster, end to end: simulated engines and smg as real processes,
a real gateway process in front; reconcile, the gate's task and the benchmark's task run in the
test's process (as the worker would run them), AIPerf for real from the tools environment.

A BF16 endpoint gets an FP8-weights canary at 20% with a gate: the gate scores the built-in prompt
set's answers under both revisions (teacher forced, top-k) and passes, a benchmark runs on each
revision, and the canary is promoted. A second canary with MXFP4 weights (coarse 4-bit scales)
fails its gate; promote is refused with a 409 naming the gate, until an admin overrides it with a
reason, which the audit log keeps. No figure is compared with a timing.
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
from deployments.endpoints import services
from deployments.experiments.benchmark import run as benchmark_run
from deployments.experiments.benchmark import services as benchmarks
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import BenchmarkStatus, CanaryStatus, QualityGateStatus
from deployments.experiments.tasks import run_quality_gate
from deployments.status import ACTIVE
from tests.conftest import Cast
from tests.experiments.canary.helpers import BF16, fp8
from tests.experiments.canary.test_end_to_end import converge, running_canary
from tests.gateway.conftest import GatewayProcess, start_gateway, stop_process

pytestmark = pytest.mark.django_db(transaction=True)
PROFILE = {"concurrency": [2], "duration_s": 3, "input_tokens": 64, "output_tokens": 16}


@pytest.fixture
def gateway(tmp_path: Path, settings: Any) -> Iterator[GatewayProcess]:
    proc = start_gateway(tmp_path, GATEWAY_REFRESH_SECONDS="30")
    settings.GATEWAY_PUBLIC_URL = proc.url  # where AIPerf sends the benchmarks' requests
    yield proc
    stop_process(proc.popen)


def call(key: str, path: str, body: dict[str, Any] | None = None) -> Any:
    client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    if body is None:
        return client.get(f"/api/v1{path}")
    return client.post(f"/api/v1{path}", json.dumps(body), content_type="application/json")


def gated_canary(actor: Any, deployment: Any, spec: dict[str, Any], key: str) -> dict[str, Any]:
    """Start a canary of ``spec`` at 20%, wait for its pool, run its gate; the gate's answer."""
    canary = canary_services.start_canary(actor, deployment.pk, spec=spec, weight=20)
    number = canary.revision.number
    converge(
        deployment,
        lambda d: (c := running_canary(d)) is not None and c.ready_replicas >= 1,
        f"revision {number}'s canary pool ready",
    )
    started = call(key, f"/deployments/{deployment.slug}/revisions/{number}/gate", {})
    assert started.status_code == 201, started.content
    assert run_quality_gate(started.json()["id"]) in (
        QualityGateStatus.PASSED,
        QualityGateStatus.FAILED,
    )
    read = call(key, f"/deployments/{deployment.slug}/revisions/{number}/gate")
    return dict(read.json())


def benchmark(actor: Any, deployment: Any, revision: int) -> None:
    queued = benchmarks.create_benchmark(actor, deployment.pk, profile=PROFILE, revision=revision)
    status = benchmark_run.run_benchmark(str(queued.pk))
    queued.refresh_from_db()
    assert status == BenchmarkStatus.SUCCEEDED, queued.error
    assert queued.results and queued.results[0]["requests"] > 0, queued.error
    # Every request was pinned to the benchmarked revision, with the canary splitting traffic.
    assert queued.served_revisions == [revision]


def test_an_fp8_canary_passes_its_gate_and_an_mxfp4_one_is_held_until_overridden(
    cast: Cast,
    fast_local: Path,
    gateway: GatewayProcess,
) -> None:
    assert aiperf_installed(settings.PLINTH_TOOLS_DIR), (
        "run `python -m deployments.drivers.local.tools_env`"
    )
    actor = cast.actor(cast.dave, cast.acme)
    developer = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="dev", kind="management", role="developer"
    ).plaintext
    admin = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="admin", kind="management", role="admin"
    ).plaintext
    deployment = services.create_deployment(actor, slug="gated", name="Gated", spec=BF16)
    deployment = converge(deployment, lambda d: d.status == ACTIVE, "the BF16 endpoint active")

    # --- FP8 weights at 20% with a gate: the gate passes, each revision is benchmarked ------
    gate = gated_canary(actor, deployment, fp8(), developer)
    assert gate["status"] == "passed", gate
    results = gate["results"]
    assert results["passed"] and results["tokens"] > 0 and results["prompts"] >= 10
    assert results["mean_kl"] <= 0.05 and results["top1_agreement"] >= 0.95
    worst = results["worst_prompts"][0]
    assert worst["prompt"] and worst["tokens"] > 0  # the worst prompts come with their text
    assert gate["prompts"] == results["prompts"] == len(results["per_prompt"])  # one count
    canary = call(developer, "/deployments/gated/canary").json()
    assert canary["gate_verdict"]["passed"] is True
    benchmark(actor, deployment, 1)
    benchmark(actor, deployment, 2)
    promoted = call(developer, "/deployments/gated/canary/promote", {})
    assert promoted.status_code == 200, promoted.content
    deployment = converge(
        deployment,
        lambda d: d.current_revision.number == 2 and d.status == ACTIVE,
        "revision 2 (FP8) serving alone",
    )

    # --- MXFP4 weights: the gate fails and promote is refused naming it ----------------------
    gate = gated_canary(actor, deployment, {**BF16, "quantization": {"method": "mxfp4"}}, developer)
    assert gate["status"] == "failed", gate
    assert gate["results"]["mean_kl"] > 0.05 or gate["results"]["top1_agreement"] < 0.95
    refused = call(developer, "/deployments/gated/canary/promote", {})
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert (
        error["code"] == "gate_refused" and "revision 3's quality gate failed" in error["message"]
    )
    assert running_canary(deployment) is not None  # still running beside revision 2

    # --- an admin overrides it with a reason (audited); then promote goes through ------------
    overridden = call(admin, "/deployments/gated/revisions/3/gate/override", {"reason": "eval ok"})
    assert overridden.status_code == 200 and overridden.json()["status"] == "overridden"
    record = AuditEvent.objects.get(action="quality_gate.override")
    assert record.after is not None and record.after["reason"] == "eval ok"
    assert record.actor_label
    assert call(developer, "/deployments/gated/canary/promote", {}).status_code == 200
    assert deployment.canaries.get(revision__number=3).status == CanaryStatus.PROMOTED
    reasons = set(deployment.events.values_list("reason", flat=True))
    assert {"QualityGatePassed", "QualityGateFailed", "QualityGateOverridden"} <= reasons
