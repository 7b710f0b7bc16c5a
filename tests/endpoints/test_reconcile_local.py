"""Reconcile passes against the local cluster, run in the test's process (no Celery here)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from datetime import timedelta
from pathlib import Path

import pytest

from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.fleet.models import Placement
from deployments.status import ACTIVE, DEGRADED
from tests.conftest import Cast
from tests.fixtures.endpoints import chat, refresh, small_spec
from tests.waiting import wait_until


def converge(deployment: Deployment, status: str, timeout: float = 90.0) -> Deployment:
    def step() -> bool:
        reconcile.reconcile(str(deployment.pk))
        return refresh(deployment).status == status

    wait_until(step, f"{status}", timeout)
    return refresh(deployment)


@pytest.mark.django_db
def test_an_endpoint_becomes_active_and_its_rollback_keeps_serving(
    cast: Cast, fast_local: Path, settings: object
) -> None:
    settings.PLINTH_STARTUP_WINDOW_S = 4  # type: ignore[attr-defined]
    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="chat", name="Chat", spec=small_spec())
    deployment = converge(deployment, ACTIVE)
    assert deployment.current_revision.number == 1
    assert deployment.router_url.startswith("http://127.0.0.1:")
    assert chat(deployment) == 200
    reasons = list(deployment.events.values_list("reason", flat=True))
    assert "Deploying" in reasons and "Ready" in reasons

    # Revision 2 never becomes ready: after its window, revision 1 keeps serving.
    services.update_settings(
        actor, deployment.pk, spec=small_spec(PLINTH_SIM_STARTUP_DELAY="3600"), base_revision=1
    )

    def rolled_back() -> bool:
        reconcile.reconcile(str(deployment.pk))
        assert chat(deployment) == 200  # never a gap while it tries
        return refresh(deployment).events.filter(reason="RolloutFailed").exists()

    wait_until(rolled_back, "rolled back", timeout=60)
    deployment = converge(deployment, ACTIVE)
    started = deployment.events.get(reason="RolloutStarted").message
    # A deadline, not a prediction of when it will be ready (Issue 18).
    assert started == (
        "revision 2: starting 1 replica(s); deadline 4 s to become ready, "
        "else revision 1 keeps serving"
    )
    failed = deployment.events.get(reason="RolloutFailed")
    assert "revision 2 was not ready within its startup window" in failed.message
    assert "revision 1 keeps serving" in failed.message
    assert deployment.current_revision.number == 1 and deployment.target_revision.number == 2

    def only_revision_1_left() -> bool:
        reconcile.reconcile(str(deployment.pk))
        return {f["revision"] for f in refresh(deployment).replica_facts} == {1}

    wait_until(only_revision_1_left, "revision 2 stopped", timeout=90)

    # Another pass does not retry the abandoned revision.
    reconcile.reconcile(str(deployment.pk))
    assert {f["revision"] for f in refresh(deployment).replica_facts} == {1}


@pytest.mark.django_db
def test_delete_tears_down_and_removes_the_row(cast: Cast, fast_local: Path) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="gone", name="Gone", spec=small_spec())
    converge(deployment, ACTIVE)
    services.delete_deployment(actor, deployment.pk)
    wait_until(lambda: not reconcile.reconcile(str(deployment.pk)), "deleted", timeout=90)
    assert not Deployment.objects.filter(pk=deployment.pk).exists()
    assert not (fast_local / str(deployment.pk)).exists()


@pytest.mark.django_db
def test_a_replica_that_dies_makes_it_degraded_until_restarted(
    cast: Cast, fast_local: Path
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="dies", name="Dies", spec=small_spec())
    deployment = converge(deployment, ACTIVE)
    record = fast_local / str(deployment.pk) / "r1-engine-0.json"
    pid = int(json.loads(record.read_text())["pid"])
    os.kill(pid, signal.SIGKILL)
    wait_until(
        lambda: not Path(f"/proc/{pid}/cmdline").exists() or _zombie(pid), "dead", timeout=90
    )
    reconcile.reconcile(str(deployment.pk))
    assert refresh(deployment).status == DEGRADED
    deployment = converge(deployment, ACTIVE)
    assert deployment.replica_facts[0]["restarts"] == 1
    assert deployment.events.filter(reason="EngineExited").exists()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.mark.django_db
def test_the_probe_stores_a_sample_of_the_interval(cast: Cast, fast_local: Path) -> None:
    from deployments.traffic import probe
    from deployments.traffic.models import MetricSample

    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="probed", name="P", spec=small_spec())
    deployment = converge(deployment, ACTIVE)
    first = probe.probe(str(deployment.pk))  # nothing was asked yet
    assert first is not None and first.requests == 0
    for _ in range(3):
        assert chat(deployment) == 200
    sample = probe.probe(str(deployment.pk))
    assert sample is not None and sample.replicas_ready == 1
    assert sample.requests == 3
    assert sample.generation_tokens > 0 and sample.prompt_tokens > 0
    assert sample.ttft_p50 is not None and sample.interval_s > 0
    # The replica's own figures, named and tagged with its revision (one replica: the whole).
    [replica] = sample.replicas
    assert replica["name"] == deployment.replica_facts[0]["name"] and replica["revision"] == 1
    assert replica["requests_per_s"] == pytest.approx(sample.requests_per_s)
    assert replica["tokens_per_s"] == pytest.approx(sample.tokens_per_s)
    assert refresh(deployment).last_probe_at == sample.ts
    assert MetricSample.objects.filter(deployment=deployment).count() == 2
    assert probe.purge_old_samples(now=sample.ts + timedelta(days=30)) == 2


@pytest.mark.django_db
def test_the_first_sample_counts_the_requests_made_before_it(cast: Cast, fast_local: Path) -> None:
    from deployments.traffic import probe

    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="early", name="E", spec=small_spec())
    deployment = converge(deployment, ACTIVE)
    for _ in range(5):  # right after it became active, before any probe
        assert chat(deployment) == 200
    sample = probe.probe(str(deployment.pk))
    assert sample is not None and sample.requests == 5
    assert sample.generation_tokens > 0 and sample.interval_s > 0
    # The next sample holds its own interval only: nothing counted twice.
    assert chat(deployment) == 200
    later = probe.probe(str(deployment.pk))
    assert later is not None and later.requests == 1


@pytest.mark.django_db
def test_stop_then_start_comes_back_through_loading(cast: Cast, fast_local: Path) -> None:
    from deployments.status import STOPPED

    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="pause", name="P", spec=small_spec())
    deployment = converge(deployment, ACTIVE)
    services.stop(actor, deployment.pk)
    deployment = converge(deployment, STOPPED)
    assert not list((fast_local / str(deployment.pk)).glob("*.json"))
    assert deployment.router_url == "" and deployment.current_revision is None
    services.start(actor, deployment.pk)
    deployment = converge(deployment, ACTIVE)
    assert chat(deployment) == 200


@pytest.mark.django_db
def test_a_start_after_an_unfinished_stop_comes_up_never_degraded(
    cast: Cast, fast_local: Path
) -> None:
    from deployments.status import DEPLOYING, LOADING, STOPPED

    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="slow", name="S", spec=small_spec())
    deployment = converge(deployment, ACTIVE)
    home = fast_local / str(deployment.pk)
    router = int(json.loads((home / "router.json").read_text())["pid"])
    os.kill(router, signal.SIGSTOP)  # a router slow to exit: the stop pass cannot finish
    try:
        services.stop(actor, deployment.pk)
        reconcile.reconcile(str(deployment.pk))
        stopped = refresh(deployment)
        assert (home / "router.json").exists()  # still on its way out
        assert stopped.status == STOPPED and stopped.current_revision is None
        services.start(actor, deployment.pk)
        seen = [refresh(deployment).status]

        def step() -> bool:
            reconcile.reconcile(str(deployment.pk))
            seen.append(refresh(deployment).status)
            return seen[-1] == ACTIVE

        wait_until(step, "active again", timeout=90)
        assert set(seen) <= {DEPLOYING, LOADING, ACTIVE}, seen
        assert chat(refresh(deployment)) == 200
        assert not _alive(router)  # the frozen router was stopped for good, not left running
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(router, signal.SIGCONT)


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and not _zombie(pid)


@pytest.mark.django_db
def test_after_plinth_local_stop_the_status_follows_what_runs(cast: Cast, fast_local: Path) -> None:
    from django.core.management import call_command
    from django.utils import timezone

    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="halt", name="H", spec=small_spec())
    deployment = converge(deployment, ACTIVE)
    assert deployment.settled
    call_command("plinth_local_stop")  # what `make run` does on Ctrl-C
    assert not list((fast_local / str(deployment.pk)).glob("*.json"))
    halted = refresh(deployment)
    assert halted.status != ACTIVE and not halted.settled
    assert halted.ready_replicas == 0 and halted.router_url == ""
    # Its placement on the local cluster too: the gateway routes by placements.
    [placement] = Placement.objects.filter(deployment=deployment)
    assert placement.ready_replicas == 0 and placement.router_url == ""
    assert halted.next_reconcile_at <= timezone.now()  # the next run observes it at once
    deployment = converge(deployment, ACTIVE)  # and brings it back
    assert chat(deployment) == 200


@pytest.mark.django_db
def test_a_fix_after_a_failed_first_deploy_gets_a_window_of_its_own(
    cast: Cast, fast_local: Path, settings: object
) -> None:
    from deployments.status import DEPLOYING, FAILED, LOADING

    settings.PLINTH_STARTUP_WINDOW_S = 2  # type: ignore[attr-defined]
    actor = cast.actor(cast.alice, cast.acme)
    never = small_spec(PLINTH_SIM_STARTUP_DELAY="3600")
    deployment = services.create_deployment(actor, slug="fixme", name="F", spec=never)
    deployment = converge(deployment, FAILED)
    services.update_settings(actor, deployment.pk, spec=small_spec(), base_revision=1)
    reconcile.reconcile(str(deployment.pk))
    fixed = refresh(deployment)
    # Revision 2 comes up in a window of its own: not failed by revision 1's spent one.
    assert fixed.status in {DEPLOYING, LOADING} and not fixed.settled
    assert fixed.failure_reason == ""
    assert fixed.events.filter(reason="Deploying", revision_number=2).exists()
    converge(deployment, ACTIVE)
