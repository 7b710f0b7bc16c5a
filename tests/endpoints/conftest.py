"""Fixtures of the deployment engine's tests: a fast local cluster, a Kubernetes API emulator
with an endpoint on it, and a spec that runs on the simulator.

The emulator is a stand-in for the API server (tests/drivers/kube_emulator.py says when a test may
use it); each test module that does says why in its docstring.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane import services as platform
from deployments.drivers.base import DeploymentRef
from deployments.drivers.local.driver import LocalDriver, LocalOptions
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.conftest import Cast
from tests.drivers.kube_emulator import RunningEmulator, running_emulator
from tests.waiting import wait_until

# Simulated engines 200 times faster than life, and drains that do not linger.
FAST_SIM_ENV = {
    "PLINTH_SIM_TIME_SCALE": "200",
    "PLINTH_SIM_DRAIN_TIMEOUT": "2",
    "HF_HUB_OFFLINE": "1",
}


def small_spec(**runtime_env: str) -> dict[str, Any]:
    return {
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
        "hardware": {"gpu": "H100-SXM"},
        "runtime": {"env": runtime_env},
    }


@pytest.fixture
def fast_local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[Path]:
    """The local cluster runs under ``tmp_path`` with fast engines; everything stops afterwards."""
    run_dir = tmp_path / "local"
    settings.PLINTH_LOCAL_RUN_DIR = run_dir
    settings.PLINTH_LOCAL_STOP_GRACE_S = 3
    settings.PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S = 1
    for name, value in FAST_SIM_ENV.items():
        monkeypatch.setenv(name, value)
    yield run_dir
    stop_everything(run_dir)


def stop_everything(run_dir: Path) -> None:
    """Teardown: stop every process any test started under ``run_dir``."""
    if not run_dir.is_dir():
        return
    driver = LocalDriver(LocalOptions(run_dir=run_dir, stop_grace_s=2))
    for child in run_dir.iterdir():
        if child.is_dir():
            ref = DeploymentRef(id=child.name, slug=child.name)
            wait_until(lambda r=ref: driver.delete(r), "stopped in teardown", timeout=30)


NS = "team-a"


@pytest.fixture
def emulator() -> Iterator[RunningEmulator]:
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    with running_emulator() as running:
        yield running


def kubeconfig(url: str) -> str:
    return f"""
apiVersion: v1
kind: Config
clusters: [{{name: emu, cluster: {{server: "{url}"}}}}]
users: [{{name: plinth, user: {{token: not-a-real-token}}}}]
contexts: [{{name: emu, context: {{cluster: emu, user: plinth, namespace: {NS}}}}}]
current-context: emu
"""


@pytest.fixture
def endpoint(cast: Cast, emulator: RunningEmulator, settings: Any) -> Deployment:
    """An endpoint on a Kubernetes cluster whose API is the emulator (nothing applied yet)."""
    settings.PLINTH_KUBE_ALLOW_HTTP = True  # the emulator speaks plain http on loopback
    settings.PLINTH_KUBE_ALLOW_HOSTS = ["127.0.0.1"]  # ... which tenants may not reach otherwise
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name="emu-kubeconfig", value=kubeconfig(emulator.url))
    cluster = services.create_cluster(
        actor, name="emu", namespace=NS, kubeconfig_secret_id=secret.pk
    )
    return services.create_deployment(
        actor, slug="kchat", name="K", spec=small_spec(), cluster_id=cluster.pk
    )


def refresh(deployment: Deployment) -> Deployment:
    return Deployment.objects.select_related(
        "target_revision", "current_revision", "applied_revision"
    ).get(pk=deployment.pk)
