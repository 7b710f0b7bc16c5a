"""An endpoint with a warm pool (``autoscaling.warm_replicas``, issue 29 item 6) scales to zero
without stopping its engine and wakes by resuming it: reconcile, the autoscaler's asks and the
local driver run for real against simulated engines and the smg router, whose start is modelled
phase by phase (``PLINTH_SIM_COLD_START``), so a resume can be told from a start."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from django.test import Client

from controlplane.crypto import engine_api_key
from deployments.autoscaling import services as autoscaler
from deployments.drivers.local.processes import ProcessTable
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.starts.models import ReplicaStart
from deployments.status import ACTIVE, SCALED_TO_ZERO
from gateway import loader
from runtime import startup
from tests.conftest import Cast
from tests.fixtures.endpoints import refresh
from tests.waiting import wait_until


def spec(warm: int) -> dict[str, object]:
    return {
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
        "hardware": {"gpu": "H100-SXM"},
        "runtime": {"env": {"PLINTH_SIM_COLD_START": "1"}},
        "autoscaling": {"min_replicas": 0, "max_replicas": 1, "scale_to_zero": True,
                        "warm_replicas": warm},
    }  # fmt: skip


def converge(deployment: Deployment, status: str) -> Deployment:
    def step() -> bool:
        reconcile.reconcile(str(deployment.pk))
        return refresh(deployment).status == status

    wait_until(step, status, timeout=40, output=lambda: describe(deployment))
    return refresh(deployment)


def describe(deployment: Deployment) -> str:
    now = refresh(deployment)
    lines = list(now.events.order_by("created_at").values_list("reason", "message"))[-8:]
    return f"{now.status} {now.replica_facts} {lines}"


def engines(run_dir: Path, deployment: Deployment) -> dict[str, int]:
    table = ProcessTable(run_dir / str(deployment.pk))
    return {r.name: r.pid for r in table.records() if r.role != "router" and r.alive()}


def scale_to_zero(deployment: Deployment) -> None:
    assert autoscaler.autoscale_to(deployment.pk, 0, "Idle", {}, expected=1)


def answered(deployment: Deployment) -> bool:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    headers = {"Authorization": f"Bearer {engine_api_key(str(deployment.pk))}"}
    url = f"{refresh(deployment).router_url}/v1/chat/completions"
    return httpx.post(url, json=body, headers=headers, timeout=30).is_success


@pytest.mark.django_db
def test_scaled_to_zero_with_a_warm_pool_the_engine_is_released_and_a_wake_resumes_it(
    cast: Cast, fast_local: Path
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    deployment = services.create_deployment(
        actor, slug="warm", name="Warm", spec=spec(1), replicas=1
    )
    deployment = converge(deployment, ACTIVE)
    pid = engines(fast_local, deployment)["r1-engine-0"]
    wait_until(lambda: ReplicaStart.objects.filter(deployment=deployment).count() == 1, "start")

    scale_to_zero(deployment)
    deployment = converge(deployment, SCALED_TO_ZERO)
    assert engines(fast_local, deployment) == {"r1-engine-0": pid}  # alive, not stopped
    assert [r["phase"] for r in deployment.replica_facts] == ["released"]
    assert deployment.ready_replicas == 0 and deployment.total_replicas == 0
    assert deployment.events.filter(reason="Released").count() == 1
    console = Client()
    console.force_login(cast.dave)
    page = console.get(f"/endpoints/{deployment.slug}/")  # the replica shown as warm
    assert page.status_code == 200 and b"<td>released <span" in page.content
    # A request held through the wake is told it waits on the resume, not on a scheduling.
    assert loader.load_endpoints([str(deployment.pk)])["warm"].start_phase == startup.RESUME

    assert autoscaler.wake(deployment.pk)  # what the gateway's hold asks for
    deployment = converge(deployment, ACTIVE)
    assert engines(fast_local, deployment) == {"r1-engine-0": pid}  # the same process
    assert deployment.events.filter(reason="Resumed").count() == 1
    assert ReplicaStart.objects.filter(deployment=deployment).count() == 1  # no second start
    wait_until(lambda: answered(deployment), "answered after the resume")


@pytest.mark.django_db
def test_scaled_to_zero_without_a_warm_pool_the_engine_stops_and_a_wake_starts_anew(
    cast: Cast, fast_local: Path
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    deployment = services.create_deployment(
        actor, slug="cold", name="Cold", spec=spec(0), replicas=1
    )
    deployment = converge(deployment, ACTIVE)
    pid = engines(fast_local, deployment)["r1-engine-0"]

    scale_to_zero(deployment)
    deployment = converge(deployment, SCALED_TO_ZERO)
    wait_until(lambda: engines(fast_local, deployment) == {}, "engine stopped")
    assert not deployment.events.filter(reason="Released").exists()

    assert autoscaler.wake(deployment.pk)
    deployment = converge(deployment, ACTIVE)
    assert engines(fast_local, deployment).get("r1-engine-0") not in (None, pid)
    assert not deployment.events.filter(reason="Resumed").exists()
