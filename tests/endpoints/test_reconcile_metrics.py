"""Reconcile passes are timed by outcome in Redis, where every worker adds to one histogram, and
read back by the control plane's /metrics.

Passes run with Celery's ``apply`` against the Kubernetes API emulator; the histogram is shared
by every test on this Redis, so each test compares counts before and after.

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): a pass's outcome is chosen by
injecting two 500s on the engine's apply, which a real API server cannot be told to answer.
"""

from __future__ import annotations

import pytest
from celery.exceptions import SoftTimeLimitExceeded
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from deployments.drivers.errors import TemporaryDriverError
from deployments.endpoints.models import Deployment
from deployments.endpoints.tasks import reconcile_deployment
from deployments.traffic import telemetry
from tests.drivers.kube_emulator import RunningEmulator

pytestmark = pytest.mark.django_db


def passes() -> dict[str, dict[str, float]]:
    """{outcome: {"count": n, "sum": s, "le=<bound>": cumulative}} as /metrics answers them."""
    answer = Client().get("/metrics")
    assert answer.status_code == 200
    found: dict[str, dict[str, float]] = {o: {} for o in telemetry.OUTCOMES}
    for family in text_string_to_metric_families(answer.content.decode()):
        if family.name != "plinth_reconcile_duration_seconds":
            continue
        for sample in family.samples:
            figures = found[sample.labels["outcome"]]
            if sample.name.endswith("_bucket"):
                figures[f"le={sample.labels['le']}"] = sample.value
            else:
                figures[sample.name.rsplit("_", 1)[1]] = sample.value
    return found


def counts() -> dict[str, float]:
    return {outcome: figures.get("count", 0.0) for outcome, figures in passes().items()}


def test_a_pass_is_counted_as_ok_with_its_time(
    kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    before = passes()["ok"]
    reconcile_deployment.apply(args=[str(kube_endpoint.pk)])
    after = passes()["ok"]
    assert after["count"] == before.get("count", 0) + 1
    assert after["sum"] > before.get("sum", 0)
    assert after["le=+Inf"] == after["count"]  # cumulative buckets end at the count


def test_temporary_errors_are_counted_apart_from_the_pass_that_succeeds(
    kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    before = counts()
    emulator.inject("PATCH", "deployments/kchat-engine", 500, times=2)
    assert reconcile_deployment.apply(args=[str(kube_endpoint.pk)]).successful()
    after = counts()
    assert after["temporary_error"] - before["temporary_error"] == 2  # then retried
    assert after["ok"] - before["ok"] == 1


def test_a_pass_that_never_ran_is_not_counted(
    kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    lock = telemetry._redis().lock(f"plinth:reconcile:{kube_endpoint.pk}", timeout=30)
    assert lock.acquire(blocking=False)
    try:
        before = counts()
        reconcile_deployment.apply(args=[str(kube_endpoint.pk)])  # another worker holds it
        assert counts() == before
    finally:
        lock.release()


@pytest.mark.parametrize(
    ("raised", "outcome"),
    [
        (TemporaryDriverError("API server busy"), "temporary_error"),
        (SoftTimeLimitExceeded(), "time_limit"),
        (RuntimeError("a bug"), "error"),
    ],
)
def test_a_pass_that_raises_is_counted_by_what_it_raised(
    raised: BaseException, outcome: str
) -> None:
    before = counts()
    with pytest.raises(type(raised)), telemetry.timed_reconcile():
        raise raised
    after = counts()
    assert {o: after[o] - before[o] for o in telemetry.OUTCOMES} == {
        o: (1 if o == outcome else 0) for o in telemetry.OUTCOMES
    }


def test_a_long_pass_lands_in_its_bucket() -> None:
    before = passes()["ok"]
    telemetry.record_reconcile("ok", 7.0)  # between the 5 s and 10 s bounds
    after = passes()["ok"]
    assert after["le=5.0"] == before.get("le=5.0", 0)
    assert after["le=10.0"] == before.get("le=10.0", 0) + 1
