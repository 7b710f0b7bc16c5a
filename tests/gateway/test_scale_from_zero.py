"""A request for an endpoint at zero replicas wakes it (a real Celery task) and is held."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import openai
import pytest

from deployments.endpoints.models import Deployment, DeploymentEvent
from tests.gateway.conftest import (
    REPO_ROOT,
    create_endpoint,
    inference_key,
    mark_scaled_to_zero,
    mark_serving,
    redis_client,
    stop_process,
    subprocess_env,
    wait_routable,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def celery_worker(gateway, tmp_path) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker on the queue the gateway sends wake-ups to."""
    argv = [sys.executable, "-m", "celery", "-A", "tests.gateway.wake_worker", "worker"]
    argv += ["--pool", "solo", "-Q", gateway.celery_queue, "-l", "warning", "--without-mingle"]
    argv += ["--without-gossip", "--without-heartbeat"]
    log = (tmp_path / "worker.log").open("wb")
    worker = subprocess.Popen(
        argv, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, env=subprocess_env()
    )
    yield worker
    stop_process(worker)
    log.close()
    redis_client().delete("gateway-test-unconsumed")


def test_a_request_wakes_a_scaled_to_zero_endpoint_and_is_answered(
    cast, sim_cluster, gateway, celery_worker
):
    endpoint = create_endpoint(cast, "sleepy")
    mark_serving(endpoint, sim_cluster.url)
    key = inference_key(cast)
    wait_routable(gateway, "sleepy", key)
    mark_scaled_to_zero(endpoint)
    client = openai.OpenAI(base_url=gateway.base_url("sleepy"), api_key=key)
    answers: list[object] = []

    def call() -> None:
        try:
            answers.append(
                client.chat.completions.create(
                    model="sim/llama-test",
                    messages=[{"role": "user", "content": "are you awake?"}],
                    max_tokens=4,
                )
            )
        except Exception as exc:  # collected and asserted on below
            answers.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    # The worker ran autoscaling.services.wake: one replica is wanted again.
    woken = wait_until(
        lambda: Deployment.objects.filter(pk=endpoint.pk, desired_replicas__gte=1).first(),
        "the endpoint to be woken",
        30,
    )
    assert not answers, "the request was answered before a replica was ready"
    mark_serving(woken, sim_cluster.url)
    caller.join(30)

    assert len(answers) == 1 and not isinstance(answers[0], Exception), answers
    assert answers[0].choices[0].message.content
    assert DeploymentEvent.objects.filter(deployment=endpoint, reason="ScaleFromZero").exists()
