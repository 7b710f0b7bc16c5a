"""Load on a real (simulated) endpoint makes the autoscaler add a replica that comes up and serves.

The local cluster runs the SGLang simulator and the smg router as processes; reconcile, the
probe and the autoscaler pass run in the test's process, in the order beat would run them.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from controlplane.crypto import engine_api_key
from deployments.autoscaling import tasks as scaling
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.status import ACTIVE
from deployments.traffic import probe
from tests.conftest import Cast
from tests.fixtures.endpoints import refresh
from tests.waiting import wait_until

# A hundred times slower than life: a few hundred tokens keep a request running for minutes,
# so the probe sees it in flight however loaded the machine is.
SLOW = {"PLINTH_SIM_TIME_SCALE": "0.01"}
SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
    "hardware": {"gpu": "H100-SXM"},
    "runtime": {"env": SLOW},
    "autoscaling": {"min_replicas": 1, "max_replicas": 2, "concurrency_target": 1,
                    "target_utilization": 1.0, "window_seconds": 30},
}  # fmt: skip


def converge(deployment: Deployment, ready: int) -> Deployment:
    def step() -> bool:
        reconcile.reconcile(str(deployment.pk))
        now = refresh(deployment)
        return now.status == ACTIVE and now.ready_replicas == ready

    wait_until(step, f"active with {ready} ready replicas", timeout=120)
    return refresh(deployment)


def engine_key(deployment: Deployment) -> dict[str, str]:
    """The endpoint's router and engines refuse callers without its key (the gateway has it)."""
    return {"Authorization": f"Bearer {engine_api_key(str(deployment.pk))}"}


def long_request(url: str, headers: dict[str, str], stop: threading.Event) -> None:
    body = {"model": "chat", "messages": [{"role": "user", "content": "count"}], "max_tokens": 400}
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True},
                          headers=headers, timeout=300) as response:  # fmt: skip
            for _ in response.iter_bytes():
                if stop.is_set():
                    return
    except httpx.HTTPError:
        return  # the endpoint was torn down under it at the end of the test


@pytest.mark.django_db
def test_requests_in_flight_add_a_replica_that_serves(cast: Cast, fast_local: Path) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    deployment = services.create_deployment(actor, slug="busy", name="Busy", spec=SPEC)
    deployment = converge(deployment, ready=1)

    stop = threading.Event()
    clients = [
        threading.Thread(
            target=long_request,
            args=(deployment.router_url, engine_key(deployment), stop),
            daemon=True,
        )
        for _ in range(2)
    ]
    for client in clients:
        client.start()
    try:
        probe.probe(str(deployment.pk))  # a first sample: counters since the engine started

        def both_in_flight() -> bool:
            sample = probe.probe(str(deployment.pk))
            return sample is not None and sample.running + sample.queued >= 2

        wait_until(both_in_flight, "two requests in flight", timeout=90)
        assert scaling.autoscale() == {"checked": 1, "scaled": 1}
        event = refresh(deployment).events.get(reason="Autoscaled")
        assert "1 -> 2" in event.message and event.data["inputs"]["peak"] >= 2

        deployment = converge(deployment, ready=2)
        assert deployment.desired_replicas == 2
        urls = {r["url"] for r in deployment.replica_facts if r.get("ready")}
        assert len(urls) == 2
        for url in urls:  # the new replica answers as the first one does
            body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 1}  # fmt: skip
            answer = httpx.post(
                f"{url}/v1/chat/completions", json=body, headers=engine_key(deployment), timeout=60
            )
            assert answer.is_success
    finally:
        stop.set()
