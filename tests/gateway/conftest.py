"""Fixtures for the gateway: real processes on loopback, real PostgreSQL and Redis.

For the whole package: two simulated engines behind one smg router (``runtime.sim.launcher``) and
one gateway process (``python -m gateway``) reading the test database. Data is created through
the services and committed (``transaction=True``), because the gateway is another process. The
only stand-in is :func:`mark_serving`: it records what reconcile would observe once a replica
is up (ready replicas and the router's address), so the gateway tests do not depend on the
drivers bringing real replicas up.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from controlplane import notify
from controlplane import services as platform
from deployments.endpoints import services as deployment_services
from deployments.endpoints.models import Deployment
from deployments.traffic.models import UsageRecord
from deployments.traffic.usage import flush_usage
from runtime.sim.launcher import REPO_ROOT, SimCluster, free_port, http_get
from tests.aio import run_async  # noqa: F401  (re-exported for the gateway tests)
from tests.conftest import Cast
from tests.waiting import wait_until

TIME_SCALE = 100.0
INFERENCE_DOMAIN = "inference.test"
SPEC: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
}


@dataclass
class GatewayProcess:
    url: str
    metrics_url: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    celery_queue: str

    def base_url(self, slug: str) -> str:
        return f"{self.url}/endpoints/{slug}/v1"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


def database_url() -> str:
    db = settings.DATABASES["default"]
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{db.get('USER') or 'postgres'}@{host}:{port}/{db['NAME']}"


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url(),
        REDIS_URL=settings.REDIS_URL,
        PLINTH_ENV="test",
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        PYTHONPATH=str(REPO_ROOT),
        HF_HUB_OFFLINE="1",
    )
    env.update(extra)
    return env


@pytest.fixture(scope="package")
def sim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    log_dir = tmp_path_factory.mktemp("sim")
    with SimCluster(engines=2, policy="round_robin", time_scale=TIME_SCALE, log_dir=log_dir) as c:
        yield c


def start_gateway(log_dir: Path, *args: str, **env: str) -> GatewayProcess:
    """A gateway process on free loopback ports; ``args`` are extra command-line flags."""
    port, metrics_port = free_port(), free_port()
    queue = f"gateway-test-{uuid.uuid4().hex[:8]}"
    log_path = log_dir / "gateway.log"
    argv = [
        sys.executable,
        "-m",
        "gateway",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        *args,
    ]
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=subprocess_env(CELERY_QUEUE=queue, LOG_LEVEL="WARNING", **env),
        )
    proc = GatewayProcess(
        f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}", popen, log_path, queue
    )
    deadline = time.monotonic() + 30
    while http_get(f"{proc.url}/health")[0] != 200:
        if popen.poll() is not None or time.monotonic() > deadline:
            stop_process(popen)
            raise RuntimeError(f"gateway did not start:\n{proc.log_text()[-3000:]}")
        time.sleep(0.1)
    return proc


def stop_process(popen: subprocess.Popen[bytes]) -> None:
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(10)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(5)


@pytest.fixture(scope="package")
def gateway(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """One gateway process for the package (table refresh every 30 s: notifications matter)."""
    proc = start_gateway(
        tmp_path_factory.mktemp("gateway"),
        GATEWAY_HOLD_SECONDS="30",
        INFERENCE_DOMAIN=INFERENCE_DOMAIN,
    )
    yield proc
    stop_process(proc.popen)


# --- data ------------------------------------------------------------------------------------


def create_endpoint(cast: Cast, slug: str, *, org: str = "acme") -> Deployment:
    owner = cast.alice if org == "acme" else cast.bob
    actor = cast.actor(owner, getattr(cast, org))
    return deployment_services.create_deployment(actor, slug=slug, name=slug, spec=SPEC)


def mark_serving(deployment: Deployment, router_url: str, replicas: int = 1) -> None:
    """What reconcile records once replicas are ready (the stand-in described above)."""
    deployment.refresh_from_db()
    revision = deployment.target_revision
    Deployment.objects.filter(pk=deployment.pk).update(
        applied_revision=revision,
        current_revision=revision,
        ready_replicas=replicas,
        total_replicas=replicas,
        router_url=router_url,
        first_ready_at=timezone.now(),
        observed_generation=deployment.generation,
    )
    notify.publish_on_commit("deployment", str(deployment.pk))


def mark_scaled_to_zero(deployment: Deployment) -> None:
    """The autoscaler scaled it to zero and reconcile saw the replicas go."""
    Deployment.objects.filter(pk=deployment.pk).update(
        desired_replicas=0, ready_replicas=0, total_replicas=0, router_url=""
    )
    notify.publish_on_commit("deployment", str(deployment.pk))


def inference_key(cast: Cast, *, org: str = "acme", **options: Any) -> str:
    owner = cast.alice if org == "acme" else cast.bob
    actor = cast.actor(owner, getattr(cast, org))
    return platform.create_api_key(actor, name="test", kind="inference", **options).plaintext


def flushed_usage(slug: str, requests: int) -> UsageRecord:
    """Flush until the endpoint's record counts ``requests``: the gateway meters each request
    just after answering it, so a test can be a moment ahead of the counters."""

    def flushed() -> UsageRecord | None:
        flush_usage(include_current=True, client=redis_client())
        return UsageRecord.objects.filter(deployment_slug=slug, requests__gte=requests).first()

    return wait_until(flushed, f"{requests} requests counted for {slug}", 10)


def wait_routable(gateway: GatewayProcess, slug: str, key: str) -> None:
    """Until the gateway's table knows the endpoint and the key (after their notifications)."""

    def ready() -> bool:
        status, _ = http_get(f"{gateway.base_url(slug)}/models", api_key=key)
        return status == 200

    wait_until(ready, f"endpoint {slug} routable", 10)
