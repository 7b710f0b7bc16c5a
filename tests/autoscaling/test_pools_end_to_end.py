"""The SLO autoscaler scales a split endpoint's pools independently, end to end: prompt-heavy load
on the local cluster (simulated prefill and decode engines, the smg router) queues prompt tokens
at the prefill pool, and the autoscaler grows that pool and leaves the decode pool as it is. An
idle split endpoint with scale-to-zero takes both pools to zero and wakes them on a request.

Reconcile, the probe and the autoscaler pass run in the test's process, in the order beat would
run them.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.utils import timezone

from deployments.autoscaling import services as autoscaler
from deployments.autoscaling import tasks as scaling
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.status import ACTIVE, SCALED_TO_ZERO, role_counts
from deployments.traffic import probe
from tests.autoscaling.test_end_to_end import engine_key
from tests.conftest import Cast
from tests.fixtures.endpoints import refresh
from tests.waiting import wait_until

# Twenty times slower than life: the prompts below keep the prefill pool busy for about half a
# minute, long enough for the probe to see them queued however loaded the machine is.
SLOW = {"PLINTH_SIM_TIME_SCALE": "0.05"}
SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
    "hardware": {"gpu": "H100-SXM"},
    "runtime": {"env": SLOW},
    "disaggregation": {"enabled": True, "transfer_backend": "mooncake_tcp"},
    # Round robin: of the three requests at the end, one reaches the new prefill replica.
    "routing": {"policy": "round_robin"},
    "autoscaling": {
        "min_replicas": 1, "max_replicas": 1, "window_seconds": 30,
        "slo": {"ttft_p90_ms": 500, "itl_p90_ms": 50},
        "prefill": {"min_replicas": 1, "max_replicas": 2},
        "decode": {"min_replicas": 1, "max_replicas": 2},
    },
}  # fmt: skip
PROMPT_TOKENS = 6000  # six of these queue more prompt tokens than one prefill replica clears in
CLIENTS = 6  # the TTFT target (about 16,000 for this model and GPU)


def pools(deployment: Deployment) -> dict[str, tuple[int, int]]:
    assert deployment.target_revision is not None
    return role_counts(deployment.replica_facts or [], deployment.target_revision.number)


def converge(deployment: Deployment, prefill: int, decode: int) -> Deployment:
    def step() -> bool:
        reconcile.reconcile(str(deployment.pk))
        now = refresh(deployment)
        counts = pools(now)
        ready = (counts.get("prefill", (0, 0))[0], counts.get("decode", (0, 0))[0])
        return now.status == ACTIVE and ready == (prefill, decode)

    def seen() -> str:
        now = refresh(deployment)
        return f"{now.status}: {now.replica_facts}"

    wait_until(step, f"active with {prefill} prefill and {decode} decode ready", timeout=180,
               output=seen)  # fmt: skip
    return refresh(deployment)


def long_prompt(url: str, headers: dict[str, str], index: int) -> None:
    # Distinct words, so no prompt finds another's prefix in the cache.
    words = " ".join(f"q{index}{n:04d}" for n in range(PROMPT_TOKENS))
    body = {"model": "chat", "messages": [{"role": "user", "content": words}], "max_tokens": 1}
    try:
        httpx.post(f"{url}/v1/chat/completions", json=body, headers=headers, timeout=600)
    except httpx.HTTPError:
        return  # the endpoint was torn down under it at the end of the test


@pytest.mark.django_db
def test_prompt_heavy_load_grows_the_prefill_pool_and_not_decode(
    cast: Cast, fast_local: Path
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    deployment = services.create_deployment(actor, slug="split", name="Split", spec=SPEC)
    deployment = converge(deployment, prefill=1, decode=1)

    clients = [
        threading.Thread(
            target=long_prompt,
            args=(deployment.router_url, engine_key(deployment), i),
            daemon=True,
        )
        for i in range(CLIENTS)
    ]
    for client in clients:
        client.start()
    probe.probe(str(deployment.pk))  # a first sample: counters since the engines started

    def prompts_queued() -> bool:
        sample = probe.probe(str(deployment.pk))
        if sample is None:
            return False
        prefill = [r for r in sample.replicas if r.get("role") == "prefill"]
        return sum(r.get("queued_tokens") or 0 for r in prefill) >= 20_000

    wait_until(prompts_queued, "prompt tokens queued at the prefill pool", timeout=120)
    assert scaling.autoscale() == {"checked": 1, "scaled": 1}

    deployment = refresh(deployment)
    event = deployment.events.get(reason="Autoscaled")
    assert event.data["pool"] == "prefill" and "1 -> 2" in event.message
    assert "queued prefill tokens" in event.message
    assert event.data["inputs"]["pool"] == "prefill"
    target = deployment.target_revision
    assert target is not None
    assert deployment.pool_sizes(target.number, target.spec) == {"prefill": 2, "decode": 1}
    assert deployment.desired_replicas == 1  # the endpoint's own count is not the pools'

    deployment = converge(deployment, prefill=2, decode=1)
    prefill = [r for r in deployment.replica_facts if r.get("role") == "prefill" and r["ready"]]
    assert len({r["url"] for r in prefill}) == 2

    # The new prefill replica serves: the router hands it prompts and the decode pool finds
    # their KV at its own bootstrap port (the load above still queues at the first one).
    def answered() -> bool:
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        reply = httpx.post(f"{deployment.router_url}/v1/chat/completions", json=body,
                           headers=engine_key(deployment), timeout=300)  # fmt: skip
        return reply.is_success

    probe.probe(str(deployment.pk))  # counters from here on
    assert all(answered() for _ in range(3))
    sample = probe.probe(str(deployment.pk))
    assert sample is not None
    served = {r["name"]: r["requests"] for r in sample.replicas if r.get("role") == "prefill"}
    assert served.get("r1-prefill-1", 0) >= 1, served


IDLE_SPEC = {
    **SPEC,
    "autoscaling": {**SPEC["autoscaling"], "min_replicas": 0, "scale_to_zero": True,  # type: ignore[dict-item]
                    "scale_to_zero_after_seconds": 60},
}  # fmt: skip


def at_zero(deployment: Deployment) -> Deployment:
    def step() -> bool:
        reconcile.reconcile(str(deployment.pk))
        now = refresh(deployment)
        return now.status == SCALED_TO_ZERO and not now.replica_facts

    wait_until(step, "scaled to zero with no replica left", timeout=120)
    return refresh(deployment)


def answers(deployment: Deployment) -> bool:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    reply = httpx.post(f"{deployment.router_url}/v1/chat/completions", json=body,
                       headers=engine_key(deployment), timeout=300)  # fmt: skip
    return reply.is_success


@pytest.mark.django_db
def test_an_idle_split_endpoint_scales_both_pools_to_zero_and_wakes_on_a_request(
    cast: Cast, fast_local: Path
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    deployment = services.create_deployment(actor, slug="nap", name="Nap", spec=IDLE_SPEC)
    assert refresh(deployment).desired_replicas == 0  # created at zero, as scale-to-zero is
    at_zero(deployment)

    assert autoscaler.wake(deployment.pk)  # what the gateway's wake-up runs on a request
    deployment = converge(deployment, prefill=1, decode=1)
    assert answers(deployment)

    later = timezone.now() + timedelta(minutes=5)  # no request since: idle past 60 s
    assert scaling.autoscale(now=later.isoformat()) == {"checked": 1, "scaled": 1}
    event = refresh(deployment).events.filter(reason="Autoscaled").latest("id")
    assert "scaling both pools to zero: 1 -> 0" in event.message
    deployment = at_zero(deployment)
    assert deployment.router_url == ""

    assert autoscaler.wake(deployment.pk)
    deployment = converge(deployment, prefill=1, decode=1)
    assert answers(deployment)
