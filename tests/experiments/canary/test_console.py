"""The Canary card on the endpoint page: start one with a weight, see it, promote or abort it."""

from __future__ import annotations

import json

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import Canary, CanaryStatus
from tests.conftest import Cast
from tests.console.conftest import signed_in
from tests.experiments.canary.helpers import BF16, fp8, mark_serving


def _serving(cast: Cast) -> Deployment:
    actor = cast.actor(cast.dave, cast.acme)
    return mark_serving(services.create_deployment(actor, slug="chat", name="Chat", spec=BF16))


def test_a_developer_starts_and_promotes_a_canary_from_the_page(cast: Cast) -> None:
    endpoint = _serving(cast)
    dave = signed_in(cast.dave)
    page = dave.get("/endpoints/chat/").content.decode()
    assert "Start a canary" in page and 'name="weight"' in page
    started = dave.post(
        "/endpoints/chat/canary/", {"spec": json.dumps(fp8()), "weight": "20", "sticky": "on"}
    )
    assert started.status_code == 302 and started["Location"].endswith("/endpoints/chat/#canary")
    canary = Canary.objects.get(deployment=endpoint)
    assert (canary.weight, canary.sticky, canary.revision.number) == (20, True, 2)
    page = dave.get("/endpoints/chat/").content.decode()
    assert "takes <strong>20%</strong>" in page and "Promote r2" in page and "Abort" in page
    assert "Start a canary" not in page
    dave.post("/endpoints/chat/canary/promote/")
    canary.refresh_from_db()
    assert canary.status == CanaryStatus.PROMOTED
    assert Deployment.objects.get(pk=endpoint.pk).target_revision.number == 2


def test_refusals_are_shown_and_change_nothing(cast: Cast) -> None:
    _serving(cast)
    dave = signed_in(cast.dave)
    answer = dave.post(
        "/endpoints/chat/canary/", {"spec": json.dumps(fp8()), "weight": "80"}, follow=True
    )
    assert "weight must be between 1 and 50" in answer.content.decode()
    answer = dave.post("/endpoints/chat/canary/", {"spec": "{not json", "weight": "5"}, follow=True)
    assert "settings as JSON" in answer.content.decode()
    assert not Canary.objects.exists()


def test_abort_from_the_page_and_viewers_see_no_buttons(cast: Cast) -> None:
    endpoint = _serving(cast)
    canary_services.start_canary(
        cast.actor(cast.dave, cast.acme), endpoint.pk, spec=fp8(), weight=5
    )
    carol = signed_in(cast.carol).get("/endpoints/chat/").content.decode()
    assert "takes <strong>5%</strong>" in carol and "Promote r2" not in carol
    assert signed_in(cast.carol).post("/endpoints/chat/canary/abort/").status_code == 403
    assert Canary.objects.get().status == CanaryStatus.RUNNING  # refused: a viewer
    signed_in(cast.dave).post("/endpoints/chat/canary/abort/", {"reason": "no"})
    assert Canary.objects.get().status == CanaryStatus.ABORTED
    page = signed_in(cast.dave).get("/endpoints/chat/").content.decode()
    assert "Last canary: r2 at 5%, aborted (no)" in page
