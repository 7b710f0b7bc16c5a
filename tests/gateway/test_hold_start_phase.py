"""A scale-from-zero hold says which start phase it waits on (issue 29 item 5): the route table
carries the phase reconcile keeps in the replica facts (``deployments.starts``), and a hold that
runs out names it in its 429's message and in ``X-Plinth-Start-Phase``."""

from __future__ import annotations

import pytest

from deployments.endpoints.models import Deployment
from gateway import loader
from gateway.errors import GatewayError
from gateway.routes import RouteTable
from runtime import startup
from tests.aio import run_async
from tests.conftest import Cast
from tests.gateway.conftest import create_endpoint
from tests.gateway.test_states import holds_for


def _waking(deployment: Deployment, phase: str) -> None:
    """Woken from zero: one replica started, reconcile saw it waiting on ``phase``."""
    facts = {"name": "sleepy-0", "role": "engine", "ready": False, "phase": "loading"}
    Deployment.objects.filter(pk=deployment.pk).update(
        desired_replicas=1,
        ready_replicas=0,
        total_replicas=1,
        router_url="",
        replica_facts=[{**facts, "start_phase": phase}, {**facts, "start_phase": "scheduled"}],
    )


@pytest.mark.django_db
def test_a_hold_that_runs_out_names_the_phase_its_replica_waits_on(cast: Cast) -> None:
    sleepy = create_endpoint(cast, "sleepy")
    _waking(sleepy, startup.CUDA_GRAPHS_CAPTURED)
    endpoint = loader.load_endpoints([str(sleepy.pk)])["sleepy"]
    assert endpoint.start_phase == startup.CUDA_GRAPHS_CAPTURED  # the replica nearest to ready

    async def scenario() -> GatewayError:
        holds, _ = await holds_for(
            RouteTable(endpoints={"sleepy": endpoint}), hold_seconds=0.2, queue_size=4
        )
        with pytest.raises(GatewayError) as raised:
            await holds.hold(endpoint)
        return raised.value

    error = run_async(scenario())
    assert error.status == 429
    assert "waiting on: cuda_graphs_captured" in error.message
    assert dict(error.headers())[b"x-plinth-start-phase"] == b"cuda_graphs_captured"
