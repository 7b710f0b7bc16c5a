"""The SDK against a running Plinth: an endpoint's model against its measured traffic
(``client.endpoints.model_accuracy``), and the optimizer asked for that endpoint
(``client.optimize(..., deployment_id=...)``) answering with the correction it applied."""

from __future__ import annotations

import sys

import pytest
from django.utils import timezone

from runtime.sim.launcher import REPO_ROOT
from tests.conftest import Cast
from tests.fixtures.measured import MODEL, measure, model_of, serving_endpoint

sys.path.insert(0, str(REPO_ROOT / "sdk"))

import plinth


@pytest.mark.django_db(transaction=True)  # the server is another process
def test_the_sdk_reads_the_model_against_measured_and_optimizes_for_the_endpoint(
    server: str, admin_key: str, cast: Cast
) -> None:
    served = serving_endpoint(cast, "served")
    rate = 0.5 * model_of(served).capacity_rps(0.5, 0.04)
    measure(served, ttft=[1.0] * 6, itl=[1.25] * 6, rate_per_replica=rate, end=timezone.now())
    client = plinth.Plinth(server, admin_key)

    accuracy = client.endpoints.model_accuracy("served", revision=1)
    [itl] = [f for f in accuracy.figures if f.metric == "itl"]
    assert accuracy.revision == 1 and itl.source == "samples"
    assert itl.correction == pytest.approx(1.25, rel=1e-3)
    assert "model corrected +25%" in itl.summary

    answer = client.optimize(MODEL, gpus=["H100-SXM"], deployment_id="served")
    assert answer.correction is not None and answer.correction.deployment == "served"
    assert answer.correction.factors["itl"] == pytest.approx(1.25, rel=1e-3)
