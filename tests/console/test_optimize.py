"""The Optimize page and the wizard's "Recommend settings": one optimizer service, three doors.

A person describes traffic and targets and gets the cheapest configuration with its reasons, a
ranked table, a Pareto chart and a waterfall; "Deploy this" opens the wizard filled with it, and
"Apply to endpoint" saves it as the endpoint's next revision, saying it came from the optimizer.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client
from django.utils import timezone

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.conftest import Cast
from tests.fixtures.measured import measure, model_of, serving_endpoint

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}
QUERY = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "gpus": ["H100-SXM", "L40S"],
    "input_tokens": "1024",
    "output_tokens": "256",
    "rate_rps": "8",
    "prefix_share": "0",
    "turns": "1",
    "ttft_ms": "1000",
    "itl_ms": "40",
}


def _ask(client: Client, **changes: Any) -> Any:
    return client.get("/optimize/", {**QUERY, **changes})


def test_the_page_offers_the_form_and_is_in_the_nav(carol: Client) -> None:
    response = carol.get("/optimize/")
    body = response.content.decode()
    assert response.status_code == 200
    assert 'href="/optimize/" aria-current="page">Optimize</a>' in body
    assert 'id="opt-ttft_ms"' in body and 'value="1000"' in body
    assert 'id="optimize-best"' not in body  # nothing asked yet, nothing searched


def test_a_profile_gets_the_cheapest_pick_reasons_chart_and_waterfall(alice: Client) -> None:
    response = _ask(alice)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Cheapest meeting the targets" in body
    assert "predicted TTFT p90" in body  # the pick's reasons
    chart = body.split('data-chart-id="chart-pareto-front" data-chart="')[1].split('"')[0]
    payload = json.loads(chart.replace("&quot;", '"').replace("&amp;", "&"))
    assert payload["kind"] == "scatter" and payload["x_unit"] == "$/h"
    xs = payload["times"]
    assert xs == sorted(xs) and len(payload["labels"]) == len(xs) > 0
    assert '<ol class="waterfall">' in body and "baseline" in body
    assert body.count("Deploy this") >= 2  # the pick and each ranked row


def test_deploy_this_opens_the_wizard_filled_with_the_pick(alice: Client) -> None:
    body = _ask(alice).content.decode()
    href = body.split('id="deploy-best"')[0].rsplit('href="', 1)[1].split('"')[0]
    url = urlparse(href.replace("&amp;", "&"))
    assert url.path == "/endpoints/new/"
    spec = json.loads(parse_qs(url.query)["spec"][0])
    wizard = alice.get(href.replace("&amp;", "&")).content.decode()
    assert 'id="prefilled"' in wizard
    gpu = spec["hardware"]["gpu"]
    assert f'<option value="{gpu}" selected>' in wizard


def test_bad_input_is_shown_next_to_its_field(alice: Client) -> None:
    response = _ask(alice, ttft_ms="fast", concurrency="4")
    assert response.status_code == 422
    body = response.content.decode()
    ttft = body.split('id="issues-opt-ttft_ms"')[1].split("</div>")[0]
    assert "Enter a number" in ttft
    concurrency = body.split('id="issues-opt-concurrency"')[1].split("</div>")[0]
    assert "not both" in concurrency
    unknown = _ask(alice, model="acme/unknown-model", gpus=[])
    assert unknown.status_code == 422
    assert "not in the catalogue" in unknown.content.decode().split('id="issues-opt-model"')[1]


def test_htmx_swaps_the_form_and_results_in_place(alice: Client) -> None:
    body = _ask(alice, confirm="on").content.decode()
    # hx-select picks #optimize-page out of the page; confirm adds the simulated figures.
    assert 'hx-select="#optimize-page"' in body
    assert 'id="best-measured"' in body and "Simulated run" in body
    # htmx swaps only 2xx answers: refused input comes back as 200 with its field errors.
    refused = alice.get("/optimize/", {**QUERY, "ttft_ms": "fast"}, **HTMX)
    assert refused.status_code == 200 and "Enter a number" in refused.content.decode()


def test_apply_to_endpoint_makes_a_revision_that_says_where_it_came_from(
    alice: Client, cast: Cast
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    own = {"served_name": "chat-model", "source": "meta-llama/Llama-3.1-8B-Instruct"}
    endpoint = services.create_deployment(
        actor, slug="chat", name="Chat", spec={"model": own, "hardware": {"gpu": "H100-SXM"}}
    )
    body = _ask(alice).content.decode()
    form = body.split('id="apply-best"')[1].split("</form>")[0]
    assert '<option value="chat">chat</option>' in form
    spec = json.loads(form.split('name="spec" value="')[1].split('"')[0].replace("&quot;", '"'))
    label = form.split('name="label" value="')[1].split('"')[0]
    response = alice.post(
        "/optimize/apply/",
        {"spec": json.dumps(spec), "label": label, "endpoint": "chat", "query": "model=x"},
    )
    assert response.status_code == 302 and response["Location"] == "/endpoints/chat/revisions/"
    endpoint.refresh_from_db()
    target = endpoint.target_revision
    assert target is not None and target.number == 2
    assert target.message == f"from the optimizer: {label}"
    assert target.spec["hardware"]["gpu"] == spec["hardware"]["gpu"]
    # The endpoint's identity stays its own: the name callers ask for is kept.
    assert target.spec["model"]["served_name"] == "chat-model"


def test_apply_refuses_another_models_settings(alice: Client, endpoint: Deployment) -> None:
    spec = {"model": {"source": "llama-3.1-70b"}, "hardware": {"gpu": "H100-SXM"}}
    response = alice.post(
        "/optimize/apply/",
        {"spec": json.dumps(spec), "label": "x", "endpoint": "chat", "query": "turns=1"},
    )
    assert response.status_code == 302 and response["Location"] == "/optimize/?turns=1"
    endpoint.refresh_from_db()
    assert endpoint.target_revision is not None and endpoint.target_revision.number == 1
    page = alice.get(response["Location"]).content.decode()
    assert "Not applied: endpoint chat serves" in page


def test_viewers_see_recommendations_but_cannot_apply(carol: Client, endpoint: Deployment) -> None:
    body = _ask(carol).content.decode()
    assert "Cheapest meeting the targets" in body and 'id="apply-best"' not in body
    response = carol.post(
        "/optimize/apply/",
        {"spec": json.dumps({"model": {}}), "label": "x", "endpoint": "chat"},
    )
    assert response.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.target_revision is not None and endpoint.target_revision.number == 1


def test_wizard_recommend_fills_the_form_with_the_pick(alice: Client) -> None:
    form = {
        "slug": "picked",
        "model.source": "meta-llama/Llama-3.1-8B-Instruct",
        "hardware.gpu": "L40S",
        "rec-input_tokens": "1024",
        "rec-output_tokens": "256",
        "rec-rate_rps": "6",
        "rec-ttft_ms": "1000",
        "rec-itl_ms": "50",
    }
    response = alice.post("/optimize/wizard/", form)
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="recommendation"' in body and "Filled in:" in body
    assert '<option value="L40S" selected>' in body  # the wizard's GPU was searched
    assert 'value="picked"' in body  # what the person typed about the endpoint stays
    bad = alice.post("/optimize/wizard/", {**form, "model.source": "acme/nothing"})
    assert 'id="recommend-problem"' in bad.content.decode()


def test_asked_for_an_endpoint_its_measured_traffic_corrects_the_picks(
    alice: Client, cast: Cast
) -> None:
    served = serving_endpoint(cast, "served")
    rate = 0.5 * model_of(served).capacity_rps(0.5, 0.04)
    measure(served, ttft=[1.0] * 8, itl=[1.3] * 8, rate_per_replica=rate, end=timezone.now())
    page = alice.get("/optimize/").content.decode()
    assert '<option value="served"' in page

    body = _ask(alice, endpoint="served").content.decode()

    assert "The model is corrected by endpoint served (r1)" in body
    assert "corrected by served&#x27;s measured traffic (ITL +30%)" in body
    refused = _ask(alice, endpoint="nowhere")
    assert refused.status_code == 422
    assert 'id="issues-opt-endpoint"><p class="issue issue-error">' in refused.content.decode()
