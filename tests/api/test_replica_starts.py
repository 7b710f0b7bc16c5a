"""Every replica start shows its phases (issue 29 item 5): an endpoint on the local cluster with
the simulator's modelled cold start becomes active; its start is recorded once, phase by phase,
listed by GET /deployments/{id}/starts, shown as a bar on its page, and counted in the
control plane's phase histogram."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.starts.models import ReplicaStart
from deployments.status import ACTIVE
from runtime import startup
from tests.api.conftest import Clients
from tests.conftest import Cast
from tests.fixtures.endpoints import refresh, small_spec
from tests.waiting import wait_until

ENGINE_PHASES = [startup.WEIGHTS_LOADED, startup.CUDA_GRAPHS_CAPTURED, startup.WARMUP]


def _active(deployment: Deployment) -> Deployment:
    def step() -> bool:
        reconcile.reconcile(str(deployment.pk))
        return refresh(deployment).status == ACTIVE

    wait_until(step, "active", timeout=90)
    return refresh(deployment)


@pytest.fixture
def started(cast: Cast, fast_local: Path) -> Deployment:
    spec = small_spec(PLINTH_SIM_COLD_START="1")
    actor = cast.actor(cast.dave, cast.acme)
    return _active(services.create_deployment(actor, slug="cold", name="Cold", spec=spec))


@pytest.mark.django_db
def test_a_replica_start_is_recorded_once_with_its_phases(
    api: Clients, started: Deployment, client: Client, cast: Cast
) -> None:
    reconcile.reconcile(str(started.pk))  # a later pass records nothing again
    start = ReplicaStart.objects.get(deployment=started)
    phases = [phase for phase, _ in start.ordered_phases()]
    assert phases == [startup.SCHEDULED, startup.IMAGE_PULLED, *ENGINE_PHASES, startup.READY]
    for phase in ENGINE_PHASES:
        assert start.phases[phase] > 0, phase
    assert start.revision == 1 and start.role == "engine"

    body = api.carol.get("deployments/cold/starts").json()
    assert body["count"] == 1
    listed = body["items"][0]
    assert [p["phase"] for p in listed["phases"]] == phases
    assert listed["replica"] == start.replica
    assert api.bob.get("deployments/cold/starts").status_code == 404

    client.force_login(cast.carol)
    page = client.get(f"/endpoints/{started.slug}/").content.decode()
    assert 'class="start-bar"' in page and "CUDA graphs captured" in page

    exported = client.get("/metrics").content.decode()
    assert 'plinth_replica_start_phase_seconds_count{phase="cuda_graphs_captured"}' in exported


@pytest.mark.django_db
def test_a_starting_replica_shows_the_phase_it_waits_on(cast: Cast, fast_local: Path) -> None:
    """While the engine loads its weights (held there by the simulator's start-up delay), the
    replica's facts name the phase, from its own log lines: what the endpoint page and the
    gateway's scale-from-zero hold show."""
    spec = small_spec(PLINTH_SIM_COLD_START="1", PLINTH_SIM_STARTUP_DELAY="60")
    actor = cast.actor(cast.dave, cast.acme)
    deployment = services.create_deployment(actor, slug="slow", name="Slow", spec=spec)

    def waiting_on_the_load() -> bool:
        reconcile.reconcile(str(deployment.pk))
        facts = refresh(deployment).replica_facts
        return any(f.get("start_phase") == startup.WEIGHTS_LOADED for f in facts)

    wait_until(waiting_on_the_load, "the replica waits on its weights load", timeout=45)
    assert not ReplicaStart.objects.filter(deployment=deployment).exists()
