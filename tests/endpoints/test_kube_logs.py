"""Logs of a Kubernetes endpoint in the API and the console: the pods' container logs, read
through the kube driver (the one implementation the local cluster's files go through too),
from the API emulator over real HTTP.

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): kwok's fake nodes serve no
container logs (no kubelet log endpoint), so the lines are written by the test, a crash-looping
pod's previous container included; and the viewers test asserts no log request reached the server.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlplane import services as platform
from controlplane.models import Role
from deployments.drivers.kube import labels as L
from deployments.endpoints.models import Deployment
from tests.conftest import Cast
from tests.drivers.kube_emulator import RunningEmulator
from tests.fixtures.endpoints import NS, kubeconfig

HTMX = {"HTTP_HX_REQUEST": "true"}


def put_pod(
    emulator: RunningEmulator, endpoint: Deployment, name: str, role: str, **status: Any
) -> None:
    labels = L.object_labels(endpoint.slug, str(endpoint.pk), 1, role)
    container = {"name": role, "image": "x", "ports": [{"containerPort": 30000}]}
    pod = {"metadata": {"name": name, "namespace": NS, "labels": labels},
           "spec": {"containers": [container]},
           "status": {"phase": "Running", **status}}  # fmt: skip
    emulator.put("v1", "Pod", NS, pod)


CRASH_LOOPING = {
    "containerStatuses": [
        {
            "name": "engine",
            "ready": False,
            "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }
    ]
}


def console(cast: Cast, user: str = "dave") -> Client:
    client = Client()
    client.force_login(getattr(cast, user))
    return client


def api_key(cast: Cast, role: str) -> dict[str, str]:
    owner = cast.actor(cast.alice, cast.acme)
    created = platform.create_api_key(owner, name=f"{role} logs", kind="management", role=role)
    return {"HTTP_AUTHORIZATION": f"Bearer {created.plaintext}"}


@pytest.mark.django_db
def test_the_logs_page_shows_a_pods_log(
    cast: Cast, kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    put_pod(emulator, kube_endpoint, "kchat-engine-a", "engine")
    put_pod(emulator, kube_endpoint, "kchat-router-a", "router")
    emulator.write_log(
        NS, "kchat-engine-a", "engine", ["loading weights", "weights loaded in 94 s"]
    )
    response = console(cast).get("/endpoints/kchat/logs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "weights loaded in 94 s" in page
    assert '<option value="kchat-router-a"' in page
    assert "Previous run" not in page  # nothing restarted


@pytest.mark.django_db
def test_the_api_reads_the_previous_container_of_a_crash_looping_pod(
    cast: Cast, kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    put_pod(emulator, kube_endpoint, "kchat-engine-a", "engine", **CRASH_LOOPING)
    emulator.write_log(NS, "kchat-engine-a", "engine", ["starting"])
    emulator.write_log(
        NS, "kchat-engine-a", "engine", ["RuntimeError: CUDA out of memory"], previous=True
    )
    dave = api_key(cast, Role.DEVELOPER)
    url = f"/api/v1/deployments/{kube_endpoint.pk}/logs"
    current = Client().get(url, **dave).json()
    assert [line["text"] for line in current["lines"]] == ["starting"]
    assert current["replicas"] == [
        {"name": "kchat-engine-a", "role": "engine", "restarts": 4, "has_previous": True}
    ]
    assert current["lines"][0]["ts"]  # the kubelet's time of each line
    previous = Client().get(f"{url}?previous=true", **dave).json()
    assert [line["text"] for line in previous["lines"]] == ["RuntimeError: CUDA out of memory"]
    assert previous["previous"] is True

    page = console(cast).get("/endpoints/kchat/logs/?previous=1").content.decode()
    assert "CUDA out of memory" in page and "Previous run" in page
    download = console(cast).get("/endpoints/kchat/logs/download/?previous=1")
    assert (
        download["Content-Disposition"]
        == 'attachment; filename="kchat-kchat-engine-a-previous.log"'
    )
    assert download.content.decode() == "RuntimeError: CUDA out of memory\n"


@pytest.mark.django_db
def test_following_in_the_console_appends_only_new_lines(
    cast: Cast, kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    put_pod(emulator, kube_endpoint, "kchat-engine-a", "engine")
    emulator.write_log(NS, "kchat-engine-a", "engine", ["first line"])
    dave = console(cast)
    page = dave.get("/endpoints/kchat/logs/?follow=1&timestamps=1").content.decode()
    assert "first line" in page and 'id="log-follow"' in page and "data-follow" in page
    poll_url = page.split('id="log-follow" hx-get="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    assert "after=" in poll_url and "timestamps=1" in poll_url
    emulator.write_log(NS, "kchat-engine-a", "engine", ["second line"])
    poll = dave.get(poll_url, **HTMX).content.decode()
    assert "second line" in poll and "first line" not in poll
    assert 'hx-swap-oob="beforeend:#log-lines"' in poll
    assert '<time class="log-ts" datetime=' in poll
    assert 'id="log-follow"' in poll  # the next poll, with the next cursor
    again_url = poll.split('id="log-follow" hx-get="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    assert "second line" not in dave.get(again_url, **HTMX).content.decode()


@pytest.mark.django_db
def test_viewers_may_not_read_logs(
    cast: Cast, kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    put_pod(emulator, kube_endpoint, "kchat-engine-a", "engine")
    emulator.write_log(NS, "kchat-engine-a", "engine", ["a prompt someone sent"])
    assert console(cast, "carol").get("/endpoints/kchat/logs/").status_code == 403
    viewer = api_key(cast, Role.VIEWER)
    response = Client().get(f"/api/v1/deployments/{kube_endpoint.pk}/logs", **viewer)
    assert response.status_code == 403
    assert "a prompt someone sent" not in response.content.decode()
    assert not [r for r in emulator.emulator._requests if r.url.path.endswith("/log")]


@pytest.mark.django_db
def test_an_unreachable_cluster_says_why_and_nothing_of_the_address(
    cast: Cast, kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    port = emulator.url.rsplit(":", 1)[1]
    platform.set_secret(
        cast.actor(cast.alice, cast.acme),
        name="emu-kubeconfig",
        value=kubeconfig(f"http://169.254.169.254:{port}"),
    )
    page = console(cast).get("/endpoints/kchat/logs/").content.decode()
    assert "Logs cannot be read right now" in page
    assert "169.254.169.254" not in page
    response = Client().get(
        f"/api/v1/deployments/{kube_endpoint.pk}/logs", **api_key(cast, Role.DEVELOPER)
    )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "logs_unavailable"
    assert "169.254.169.254" not in response.content.decode()
    assert not emulator.emulator._requests
