"""The console's logs of a Kubernetes endpoint: the pods' logs, read through the kube driver
(the one implementation the local cluster's files go through too)."""

from __future__ import annotations

import pytest
from django.test import Client

from controlplane import services as platform
from deployments.drivers.kube import labels as L
from deployments.models import Deployment
from tests.conftest import Cast
from tests.drivers.kube_emulator import RunningEmulator
from tests.engine.conftest import NS, kubeconfig


def put_pod(emulator: RunningEmulator, endpoint: Deployment, name: str, role: str) -> None:
    labels = L.object_labels(endpoint.slug, str(endpoint.pk), 1, role)
    container = {"name": role, "image": "x", "ports": [{"containerPort": 30000}]}
    pod = {"metadata": {"name": name, "namespace": NS, "labels": labels},
           "spec": {"containers": [container]}, "status": {"phase": "Running"}}  # fmt: skip
    emulator.put("v1", "Pod", NS, pod)


def logs_page(cast: Cast, query: str = "") -> str:
    console = Client()
    console.force_login(cast.carol)
    response = console.get(f"/endpoints/kchat/logs/{query}")
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_the_logs_page_shows_a_pods_log(
    cast: Cast, endpoint: Deployment, emulator: RunningEmulator
) -> None:
    put_pod(emulator, endpoint, "kchat-engine-a", "engine")
    put_pod(emulator, endpoint, "kchat-router-a", "router")
    log = f"/api/v1/namespaces/{NS}/pods/kchat-engine-a/log"
    emulator.emulator["get", log] << b"loading weights\nweights loaded in 94 s\n"
    page = logs_page(cast)
    assert "weights loaded in 94 s" in page
    assert '<option value="kchat-router-a"' in page


@pytest.mark.django_db
def test_an_unreachable_cluster_says_why_and_nothing_of_the_address(
    cast: Cast, endpoint: Deployment, emulator: RunningEmulator
) -> None:
    port = emulator.url.rsplit(":", 1)[1]
    platform.set_secret(
        cast.actor(cast.alice, cast.acme),
        name="emu-kubeconfig",
        value=kubeconfig(f"http://169.254.169.254:{port}"),
    )
    page = logs_page(cast)
    assert "Logs cannot be read right now" in page
    assert "169.254.169.254" not in page
    assert not emulator.emulator._requests
