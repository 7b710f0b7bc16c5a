"""The control plane's /metrics: who may read it, request latency by route, endpoints by status
(one query, no organization's names), task queue depth from the real broker, and an answer that
survives a source being down."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from controlplane.celery import app as celery_app
from deployments.endpoints import services
from deployments.status import ALL_STATUSES
from runtime.sim.launcher import REPO_ROOT, free_port
from tests.conftest import Cast
from tests.gateway.conftest import stop_process, subprocess_env
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db
SPEC: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
}
TOKEN = "a-long-random-metrics-token-for-tests"


def scrape(client: Client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one /metrics answer, which must be a 200."""
    answer = client.get("/metrics", **headers)
    assert answer.status_code == 200, answer.content
    samples = {}
    for family in text_string_to_metric_families(answer.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


# --- who may read it -------------------------------------------------------------------------


def test_without_a_token_only_this_machine_may_read_it(client: Client) -> None:
    assert client.get("/metrics").status_code == 200  # the test client is 127.0.0.1
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.0.3.7").status_code == 403
    # A proxy on this machine relays the public's requests from loopback: not local.
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 403
    assert client.get("/metrics", HTTP_FORWARDED="for=203.0.113.9").status_code == 403


def test_with_a_token_only_its_bearer_may_read_it(client: Client, settings: Any) -> None:
    settings.PLINTH_METRICS_TOKEN = TOKEN
    refused = client.get("/metrics")  # loopback is not enough any more
    assert refused.status_code == 403
    assert b"plinth_" not in refused.content
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION=TOKEN).status_code == 403  # no scheme
    # Prometheus scrapes a pod by its address, which is no allowed host: answered all the same.
    settings.ALLOWED_HOSTS = ["plinth.example.com"]
    answer = client.get(
        "/metrics",
        HTTP_AUTHORIZATION=f"Bearer {TOKEN}",
        HTTP_HOST="10.0.3.7:8000",
        REMOTE_ADDR="10.0.9.1",
    )
    assert answer.status_code == 200
    assert answer["Content-Type"].startswith("text/plain; version=0.0.4")


def test_only_get_is_answered(client: Client) -> None:
    answer = client.post("/metrics")
    assert answer.status_code == 405 and answer["Allow"] == "GET, HEAD"


# --- what it says ----------------------------------------------------------------------------


def test_requests_are_timed_by_route_never_by_path(client: Client) -> None:
    route = "/api/v1/deployments/<deployment_id>"
    before = scrape(client)
    for _ in range(2):
        client.get(f"/api/v1/deployments/{uuid.uuid4()}")  # 401: no key; still a request
    client.get("/no/such/page/")
    after = scrape(client)

    count = "plinth_http_request_duration_seconds_count"
    assert (
        value(after, count, route=route, method="GET")
        - value(before, count, route=route, method="GET")
        == 2
    )
    requests = "plinth_http_requests_total"
    assert (
        value(after, requests, route=route, method="GET", status="401")
        - value(before, requests, route=route, method="GET", status="401")
        == 2
    )
    assert value(after, requests, route="unmatched", method="GET", status="404") > value(
        before, requests, route="unmatched", method="GET", status="404"
    )
    assert not any("no/such" in str(labels) for _, labels in after)


def test_endpoints_by_status_in_one_query_naming_no_organization(
    cast: Cast, client: Client
) -> None:
    acme = cast.actor(cast.alice, cast.acme)
    globex = cast.actor(cast.bob, cast.globex)
    services.create_deployment(acme, slug="acme-chat", name="Acme chat", spec=SPEC)
    stopped = services.create_deployment(acme, slug="acme-code", name="Code", spec=SPEC)
    services.stop(acme, stopped.pk)
    services.create_deployment(globex, slug="globex-chat", name="Globex chat", spec=SPEC)

    with CaptureQueriesContext(connection) as queries:
        answer = client.get("/metrics")
    assert len(queries) == 1  # whatever the number of endpoints
    text = answer.content.decode()
    for private in ("acme-chat", "globex-chat", "Acme", "Globex"):
        assert private not in text

    samples = scrape(client)
    assert value(samples, "plinth_endpoints", status="pending") == 2
    assert value(samples, "plinth_endpoints", status="stopped") == 1
    for status in ALL_STATUSES:  # every status is a series, zero included
        assert ("plinth_endpoints", (("status", status),)) in samples


def test_task_queue_depth_is_the_brokers_count(client: Client, broker: redis.Redis) -> None:
    assert value(scrape(client), "plinth_task_queue_depth", queue="plinth") == 0
    for _ in range(3):  # nothing consumes them here; the broker fixture empties the queue after
        celery_app.send_task("deployments.purge_samples")
    assert value(scrape(client), "plinth_task_queue_depth", queue="plinth") == 3
    up = scrape(client)
    assert value(up, "plinth_metrics_source_up", source="broker") == 1


def test_a_source_that_is_down_leaves_out_its_family_only(client: Client, settings: Any) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there: refused at once
    samples = scrape(client)
    assert value(samples, "plinth_metrics_source_up", source="redis") == 0
    assert value(samples, "plinth_metrics_source_up", source="database") == 1
    assert not any(name.startswith("plinth_reconcile_") for name, _ in samples)
    assert any(name == "plinth_endpoints" for name, _ in samples)


# --- served as in production ------------------------------------------------------------------


@pytest.fixture
def console(tmp_path: Path) -> Iterator[str]:
    """The console/API process as in production: uvicorn serving ``controlplane.asgi`` (pooled
    database connections), with a metrics token and a public host name set."""
    port = free_port()
    log = tmp_path / "uvicorn.log"
    env = subprocess_env(
        PLINTH_DATA_DIR=str(tmp_path),
        PLINTH_METRICS_TOKEN=TOKEN,
        ALLOWED_HOSTS="plinth.example.com",
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log"],
        cwd=REPO_ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if server.poll() is not None:
            return True
        try:
            return httpx.get(f"{url}/metrics", timeout=2).status_code == 403
        except httpx.TransportError:
            return False

    try:
        wait_until(up, "uvicorn", 30)
        assert server.poll() is None, log.read_text()
        yield url
    finally:
        stop_process(server)


@pytest.mark.django_db(transaction=True)  # the server is another process
def test_metrics_answer_under_uvicorn_to_the_tokens_bearer(cast: Cast, console: str) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    services.create_deployment(actor, slug="served", name="Served", spec=SPEC)
    pod_address = {"Host": "10.0.3.7:8000"}  # how Prometheus addresses a pod
    refused = httpx.get(f"{console}/metrics", headers=pod_address)
    assert refused.status_code == 403
    answer = httpx.get(
        f"{console}/metrics", headers={**pod_address, "Authorization": f"Bearer {TOKEN}"}
    )
    assert answer.status_code == 200
    assert 'plinth_endpoints{status="pending"} 1.0' in answer.text
    assert 'plinth_metrics_source_up{source="database"} 1.0' in answer.text
