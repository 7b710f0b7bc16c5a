"""A scale-from-zero hold says which start phase it waits on (issue 29 item 5): the route table
carries the phase reconcile keeps in the replica facts (``deployments.starts``), and a hold that
runs out names it in its 429's message and in ``X-Plinth-Start-Phase``."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from deployments.drivers import base
from deployments.drivers.local.driver import LocalDriver, LocalOptions
from deployments.endpoints.models import Deployment
from deployments.starts.services import observe_starts
from gateway import loader
from gateway.errors import GatewayError
from gateway.routes import Endpoint, RouteTable
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

    error = run_async(_held_until_it_runs_out(endpoint))
    assert error.status == 429
    assert "waiting on: cuda_graphs_captured" in error.message
    assert dict(error.headers())[b"x-plinth-start-phase"] == b"cuda_graphs_captured"


async def _held_until_it_runs_out(endpoint: Endpoint) -> GatewayError:
    table = RouteTable(endpoints={endpoint.slug: endpoint})
    holds, _ = await holds_for(table, hold_seconds=0.2, queue_size=4)
    with pytest.raises(GatewayError) as raised:
        await holds.hold(endpoint)
    return raised.value


@pytest.mark.django_db
@pytest.mark.parametrize("phase", [base.RELEASED, base.RESUMING])
def test_a_hold_woken_onto_a_warm_replica_waits_on_its_resume(
    cast: Cast, tmp_path: Path, phase: str
) -> None:
    """At zero with a warm pool, the wake resumes the released replica (the same process, its
    weights copied back): the hold waits on that resume, not on a scheduling it will never see.
    The facts are the drivers' for such a replica, through the writer reconcile calls."""
    sleepy = create_endpoint(cast, "sleepy")
    released = base.ReplicaFacts(
        name="r1-engine-0",
        revision=1,
        role="engine",
        phase=phase,
        ready=False,
        reason="WarmPool",
        milestones=dict.fromkeys((startup.CREATED, startup.SCHEDULED, startup.IMAGE_PULLED), 1e9),
    )
    driver = LocalDriver(LocalOptions(run_dir=tmp_path))
    ref = base.DeploymentRef(id=str(sleepy.pk), slug=sleepy.slug)
    seen = observe_starts(
        sleepy, driver, ref, base.Observation(replicas=(released,)), datetime.now(UTC)
    )
    Deployment.objects.filter(pk=sleepy.pk).update(
        desired_replicas=1,
        ready_replicas=0,
        router_url="",
        replica_facts=[facts.as_dict() for facts in seen.replicas],
    )
    endpoint = loader.load_endpoints([str(sleepy.pk)])["sleepy"]

    error = run_async(_held_until_it_runs_out(endpoint))
    assert "waiting on: resume" in error.message
    assert dict(error.headers())[b"x-plinth-start-phase"] == startup.RESUME.encode()
