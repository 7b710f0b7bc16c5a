"""End to end: the REST API, PostgreSQL, Redis, a real Celery worker and beat, real processes.

An endpoint created through the API on the local cluster becomes active and its router answers
chat completions; a killed engine makes it degraded until it is restarted; a worker killed in the
middle of a deploy is replaced and the deploy completes with no duplicate processes; a revision
that never becomes ready is rolled back while the old one keeps answering.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from controlplane import services as platform
from deployments.endpoints.models import Deployment
from deployments.status import ACTIVE, DEGRADED
from tests.conftest import Cast
from tests.endpoints import processes
from tests.fixtures.endpoints import chat, refresh, small_spec, stop_everything
from tests.waiting import wait_until


@dataclass
class Stack:
    run_dir: Path
    env: dict[str, str]
    worker: subprocess.Popen[bytes]
    beat: subprocess.Popen[bytes]
    key: str

    def restart_worker(self) -> None:
        self.worker = processes.start("worker", self.env, self.run_dir.parent / "worker.log")

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        client = Client(HTTP_AUTHORIZATION=f"Bearer {self.key}")
        call = getattr(client, method)
        response = call(
            f"/api/v1{path}", data=json.dumps(body or {}), content_type="application/json"
        )
        assert response.status_code < 300, response.content
        return response.json()


@pytest.fixture
def stack(cast: Cast, tmp_path: Path, queue: str) -> Iterator[Stack]:
    run_dir = tmp_path / "local"
    env = processes.engine_env(run_dir, queue, PLINTH_STARTUP_WINDOW_S="6")
    key = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="e2e", kind="management", role="developer"
    ).plaintext
    worker = processes.start("worker", env, tmp_path / "worker.log")
    beat = processes.start("beat", env, tmp_path / "beat.log")
    running = Stack(run_dir, env, worker, beat, key)
    try:
        yield running
    finally:
        processes.stop(running.beat)
        processes.stop(running.worker)
        stop_everything(run_dir)


def wait_status(deployment: Deployment, status: str, timeout: float = 90.0) -> Deployment:
    wait_until(lambda: refresh(deployment).status == status, f"{status}", timeout)
    return refresh(deployment)


@pytest.mark.django_db(transaction=True)
def test_create_kill_recover_and_roll_back_through_the_api(stack: Stack) -> None:
    spec = small_spec(PLINTH_SIM_STARTUP_DELAY="2")
    created = stack.api("post", "/deployments", {"slug": "e2e-chat", "name": "E2E", "spec": spec})
    deployment = Deployment.objects.get(pk=created["id"])
    deployment = wait_status(deployment, ACTIVE)
    assert chat(deployment) == 200

    # Kill the engine: the endpoint is degraded, then the worker restarts it.
    record = stack.run_dir / str(deployment.pk) / "r1-engine-0.json"
    os.kill(json.loads(record.read_text())["pid"], signal.SIGKILL)
    wait_status(deployment, DEGRADED)
    deployment = wait_status(deployment, ACTIVE)
    assert deployment.replica_facts[0]["restarts"] == 1
    assert chat(deployment) == 200

    # A revision that never becomes ready is rolled back; revision 1 answers throughout.
    never = small_spec(PLINTH_SIM_STARTUP_DELAY="3600")
    stack.api("patch", f"/deployments/{deployment.pk}", {"spec": never, "base_revision": 1})

    def rolled_back() -> bool:
        assert chat(deployment) == 200
        return deployment.events.filter(reason="RolloutFailed").exists()

    wait_until(rolled_back, "rolled back", timeout=60)
    deployment = wait_status(deployment, ACTIVE)
    assert (deployment.current_revision.number, deployment.target_revision.number) == (1, 2)
    event = deployment.events.get(reason="RolloutFailed")
    assert "rolled back: revision 1 keeps serving" in event.message


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_deploy_is_replaced_without_duplicates(stack: Stack) -> None:
    spec = small_spec(PLINTH_SIM_STARTUP_DELAY="4")
    created = stack.api(
        "post", "/deployments", {"slug": "e2e-crash", "name": "Crash", "spec": spec}
    )
    deployment = Deployment.objects.get(pk=created["id"])
    home = stack.run_dir / str(deployment.pk)
    wait_until(lambda: processes.processes_of(home), "engine started", timeout=90)
    stack.worker.kill()  # SIGKILL: no cleanup, a task may be half done
    stack.worker.wait(10)
    assert refresh(deployment).status != ACTIVE
    stack.restart_worker()
    deployment = wait_status(deployment, ACTIVE)
    pids = processes.processes_of(home)
    assert len(pids) == 2  # one engine and one router: adopted, not started again
    records = sorted(p.stem for p in home.glob("*.json"))
    assert records == ["r1-engine-0", "router"]
    assert chat(deployment) == 200
