"""The endpoint page's status card is never stale: it polls from the moment a change commits
until what runs is what was asked for, and says what became of a target that does not serve
(issue 12 item 8)."""

from __future__ import annotations

from django.test import Client

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.conftest import Cast
from tests.console.conftest import SPEC
from tests.observed import observe

HTMX = {"HTTP_HX_REQUEST": "true"}
BIGGER = {**SPEC, "batching": {"max_running_requests": 64}}


def _card(client: Client, slug: str = "chat") -> tuple[int, str]:
    response = client.get(f"/endpoints/{slug}/status/", **HTMX)
    return response.status_code, response.content.decode()


def test_the_page_after_an_edit_polls_until_the_new_revision_serves(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    observe(endpoint, serving=1, ready={1: 1})
    assert 'hx-trigger="every 2s"' not in alice.get("/endpoints/chat/").content.decode()
    services.update_settings(
        cast.actor(cast.alice, cast.acme), endpoint.pk, spec=BIGGER, base_revision=1
    )
    page = alice.get("/endpoints/chat/").content.decode()
    assert 'hx-trigger="every 2s"' in page and 'data-settled="false"' in page
    code, card = _card(alice)
    assert code == 200 and "r1 serving · r2 rolling out" in card
    observe(endpoint, serving=2, ready={1: 1, 2: 1})  # promoted; revision 1 still retiring
    code, card = _card(alice)
    assert code == 200 and "hx-trigger" in card
    observe(endpoint, serving=2, ready={2: 1})
    code, card = _card(alice)
    assert code == 286 and "r2 serving" in card and "rolling out" not in card
    assert "Replicas ready</dt><dd>1 / 1" in card


def test_an_abandoned_rollout_is_said_so_not_rolling_out(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    observe(endpoint, serving=1, ready={1: 1})
    services.update_settings(
        cast.actor(cast.alice, cast.acme), endpoint.pk, spec=BIGGER, base_revision=1
    )
    # Revision 2 missed its window: the pass placed revision 1 again.
    observe(endpoint, serving=1, applied=1, ready={1: 1})
    code, card = _card(alice)
    assert code == 286
    assert "r2 was not ready in time; rolled back" in card and "rolling out" not in card


def test_a_scale_down_polls_until_the_extra_replica_is_gone(cast: Cast, alice: Client) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    spec = {**SPEC, "autoscaling": {"min_replicas": 1, "max_replicas": 2}}
    wide = services.create_deployment(actor, slug="wide", name="Wide", spec=spec, replicas=2)
    observe(wide, serving=1, ready={1: 2})
    assert _card(alice, "wide")[0] == 286
    services.scale(actor, wide.pk, replicas=1)
    observe(wide, serving=1, ready={1: 2})  # acted on, the second replica still up
    code, card = _card(alice, "wide")
    assert code == 200 and 'data-settled="false"' in card
    observe(wide, serving=1, ready={1: 1})
    assert _card(alice, "wide")[0] == 286


def test_a_start_after_a_stop_shows_it_coming_up(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    observe(endpoint, serving=1, ready={1: 1})
    services.stop(actor, endpoint.pk)
    observe(endpoint, serving=None)  # every replica stopped: nothing serves
    assert _card(alice)[0] == 286
    services.start(actor, endpoint.pk)
    for seen in ({}, {1: 1}):
        observe(endpoint, serving=None, starting=seen)
        code, card = _card(alice)
        assert code == 200
        assert 'data-status="deploying"' in card or 'data-status="loading"' in card


def test_live_pages_are_never_shown_from_a_back_button_copy(
    alice: Client, endpoint: Deployment
) -> None:
    for path, headers in (
        ("/endpoints/", {}),
        ("/endpoints/chat/", {}),
        ("/endpoints/chat/status/", HTMX),
    ):
        response = alice.get(path, **headers)
        assert "no-store" in response["Cache-Control"], path
