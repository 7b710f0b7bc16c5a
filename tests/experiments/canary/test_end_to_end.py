"""Canaries on the local cluster, end to end: simulated engines and smg as real processes, a real
gateway process in front, reconcile, the probe and the canary watcher run in the test's process in
the order beat would run them.

A BF16 endpoint gets an FP8-weights canary at 20%: both pools run, 1,000 requests through the
gateway split within 5 points of the weight (each answer names its revision), and promote rolls
the canary's revision out to the endpoint and removes the canary's pool. A second canary whose
engine the simulator slows (``PLINTH_SIM_SLOWDOWN``, a degraded GPU) is aborted by the watcher
with an event naming the regression, and the gateway sends it nothing more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane import services as platform
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services
from deployments.experiments.canary.rules import Thresholds
from deployments.experiments.models import Canary, CanaryStatus
from deployments.experiments.tasks import watch_canaries
from deployments.status import ACTIVE
from deployments.traffic import probe
from tests.conftest import Cast
from tests.experiments.canary.helpers import BF16, fp8
from tests.fixtures.endpoints import converge
from tests.gateway.conftest import GatewayProcess, start_gateway, stop_process
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
REQUESTS = 1000
BODY = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    proc = start_gateway(tmp_path, GATEWAY_REFRESH_SECONDS="30")
    yield proc
    stop_process(proc.popen)


def running_canary(deployment: Deployment) -> Canary | None:
    return deployment.canaries.filter(status=CanaryStatus.RUNNING).first()


def ask(client: httpx.Client, url: str, key: str, session: str = "", **body: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    if session:
        headers["X-Plinth-Session"] = session
    return client.post(
        f"{url}/chat/completions", json={**BODY, **body}, headers=headers, timeout=60
    )


def test_a_canary_splits_traffic_promotes_and_a_slow_one_is_aborted(
    cast: Cast,
    fast_local: Path,
    gateway: GatewayProcess,
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    key = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="canary test", kind="inference"
    ).plaintext
    deployment = services.create_deployment(actor, slug="split", name="Split", spec=BF16)
    deployment = converge(deployment, lambda d: d.status == ACTIVE, "the BF16 endpoint active")
    url = gateway.base_url("split")

    # --- an FP8 canary at 20%: both revisions serve ----------------------------------------
    canary_services.start_canary(actor, deployment.pk, spec=fp8(), weight=20)
    converge(
        deployment,
        lambda d: (c := running_canary(d)) is not None and c.ready_replicas >= 1,
        "the canary's pool ready",
    )
    with httpx.Client() as client:

        def canary_answers() -> bool:
            answer = ask(client, url, key)
            return answer.headers.get("x-plinth-revision") == "2"

        wait_until(canary_answers, "the gateway sending requests to the canary", timeout=30)
        seen: Counter[str] = Counter()
        for _ in range(REQUESTS):
            answer = ask(client, url, key)
            assert answer.status_code == 200, answer.text
            seen[answer.headers["x-plinth-revision"]] += 1
    assert set(seen) == {"1", "2"}
    share = seen["2"] / REQUESTS * 100
    assert abs(share - 20) <= 5, f"the canary got {share:.1f}% of {REQUESTS} requests: {seen}"

    # --- promote: the canary's revision serves everything; its own pool goes ---------------
    canary_services.promote_canary(actor, deployment.pk)
    deployment = converge(
        deployment,
        lambda d: (
            d.current_revision.number == 2 and d.status == ACTIVE and d.canaries.get().pool_removed
        ),
        "revision 2 serving alone",
    )
    assert not (fast_local / f"{deployment.pk}-r2").exists()
    with httpx.Client() as client:
        wait_until(
            lambda: ask(client, url, key).headers.get("x-plinth-revision") == "2",
            "answers from revision 2",
            timeout=30,
        )

    # --- a sticky canary on a slowed engine is aborted by the watcher -----------------------
    slowed = fp8(fp8(), PLINTH_SIM_SLOWDOWN="8")
    canary = canary_services.start_canary(
        actor, deployment.pk, spec=slowed, weight=50, sticky=True,
        thresholds=Thresholds(min_requests=10),
    )  # fmt: skip
    converge(
        deployment,
        lambda d: (c := running_canary(d)) is not None and c.ready_replicas >= 1,
        "the slowed canary's pool ready",
    )
    sessions: dict[str, set[str]] = {}
    with httpx.Client() as client:
        wait_until(
            lambda: {ask(client, url, key, f"probe-{n}").headers["x-plinth-revision"]
                     for n in range(8)} == {"2", "3"},
            "the gateway sending conversations to the slowed canary",
            timeout=30,
        )  # fmt: skip
        for turn in range(5):
            for n in range(12):  # each conversation repeats its first message every turn
                first = {"role": "user", "content": f"conversation {n}"}
                history = [first, *[{"role": "user", "content": "go on"}] * turn]
                answer = ask(client, url, key, messages=history, max_tokens=8)
                assert answer.status_code == 200
                sessions.setdefault(f"conversation {n}", set()).add(
                    answer.headers["x-plinth-revision"]
                )
    # Sticky: every conversation stayed on one revision, and both revisions had some.
    assert all(len(seen) == 1 for seen in sessions.values()), sessions
    assert set().union(*sessions.values()) == {"2", "3"}, sessions

    def judged_and_aborted() -> bool:
        probe.probe(str(deployment.pk))  # per-revision latency of the interval
        return watch_canaries()["aborted"] == 1

    # The gateway's counts reach Redis within a second of each answer: poll, as beat would.
    wait_until(judged_and_aborted, "the slowed canary aborted", timeout=60, interval=1.0)
    canary.refresh_from_db()
    assert canary.status == CanaryStatus.ABORTED
    event = deployment.events.get(reason="CanaryAborted", revision_number=3)
    assert event.level == "error" and "p90" in event.message and "x >" in event.message
    assert event.data["automatic"] is True and event.data["canary"]["requests"] >= 10
    deployment = converge(
        deployment, lambda d: d.canaries.get(pk=canary.pk).pool_removed, "the pool removed"
    )
    with httpx.Client() as client:
        wait_until(
            lambda: all(
                ask(client, url, key).headers.get("x-plinth-revision") == "2" for _ in range(4)
            ),
            "every answer from revision 2 again",
            timeout=30,
        )
