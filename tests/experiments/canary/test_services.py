"""Starting, promoting and aborting canaries through the services, and the rules they keep."""

from __future__ import annotations

import pytest

from controlplane.access import AccessDenied
from controlplane.models import AuditEvent, Role
from controlplane.services import Conflict, ServiceError
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services
from deployments.experiments.canary.rules import Thresholds
from deployments.experiments.models import Canary, CanaryStatus
from deployments.quotas import services as quotas
from deployments.quotas.models import Quota
from gateway.loader import load_endpoints
from gateway.split import Splitter
from tests.conftest import Cast
from tests.experiments.canary.helpers import BF16, fp8, mark_serving


@pytest.fixture
def serving(cast: Cast) -> Deployment:
    actor = cast.actor(cast.dave, cast.acme)
    return mark_serving(services.create_deployment(actor, slug="chat", name="Chat", spec=BF16))


def test_a_canary_is_a_new_revision_beside_the_unchanged_target(
    cast: Cast, serving: Deployment
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    canary = canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=20, sticky=True)
    serving.refresh_from_db()
    assert canary.revision.number == 2 and canary.baseline_revision.number == 1
    assert serving.target_revision.number == 1  # the baseline keeps serving everything else
    assert serving.generation == 2  # reconcile is asked to start the canary's pool
    assert canary.revision.spec["quantization"]["method"] == "fp8"
    assert (canary.weight, canary.sticky, canary.status) == (20, True, CanaryStatus.RUNNING)
    event = serving.events.get(reason="CanaryStarted")
    assert "20%" in event.message and event.revision_number == 2
    assert AuditEvent.objects.filter(action="deployment.canary.start").count() == 1


@pytest.mark.parametrize("weight", [0, 51, -3])
def test_the_weight_is_one_to_fifty_percent(cast: Cast, serving: Deployment, weight: int) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    with pytest.raises(ServiceError) as refused:
        canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=weight)
    assert refused.value.field == "weight"
    assert not Canary.objects.exists()


def test_thresholds_out_of_range_are_refused_by_name(cast: Cast, serving: Deployment) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    with pytest.raises(ServiceError) as refused:
        canary_services.start_canary(
            actor, serving.pk, spec=fp8(), weight=10, thresholds=Thresholds(max_ttft_p90_ratio=0.5)
        )
    assert refused.value.field == "thresholds.max_ttft_p90_ratio"


def test_one_canary_at_a_time_and_only_on_a_serving_endpoint(
    cast: Cast, serving: Deployment
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    other = services.create_deployment(actor, slug="idle", name="Idle", spec=BF16)
    with pytest.raises(Conflict) as not_serving:
        canary_services.start_canary(actor, other.pk, spec=fp8(), weight=10)
    assert not_serving.value.code == "not_serving"
    canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=10)
    with pytest.raises(Conflict) as second:
        canary_services.start_canary(actor, serving.pk, spec=fp8(BF16, PLINTH_SIM_X="1"), weight=10)
    assert second.value.code == "canary_running"


def test_the_serving_settings_again_are_no_canary(cast: Cast, serving: Deployment) -> None:
    with pytest.raises(ServiceError) as refused:
        canary_services.start_canary(
            cast.actor(cast.dave, cast.acme), serving.pk, spec=BF16, weight=5
        )
    assert refused.value.field == "spec"


def test_viewers_may_not_start_promote_or_abort(cast: Cast, serving: Deployment) -> None:
    viewer = cast.actor(cast.carol, cast.acme)
    with pytest.raises(AccessDenied):
        canary_services.start_canary(viewer, serving.pk, spec=fp8(), weight=10)
    canary_services.start_canary(
        cast.actor(cast.dave, cast.acme), serving.pk, spec=fp8(), weight=10
    )
    with pytest.raises(AccessDenied):
        canary_services.promote_canary(viewer, serving.pk)
    with pytest.raises(AccessDenied):
        canary_services.abort_canary(viewer, serving.pk)


def test_promote_makes_the_canary_the_target(cast: Cast, serving: Deployment) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=20)
    canary = canary_services.promote_canary(actor, serving.pk)
    serving.refresh_from_db()
    assert canary.status == CanaryStatus.PROMOTED and canary.ended_at is not None
    assert serving.target_revision.number == 2 and serving.current_revision.number == 1
    assert serving.events.filter(reason="CanaryPromoted").exists()
    with pytest.raises(Conflict) as again:
        canary_services.promote_canary(actor, serving.pk)
    assert again.value.code == "no_canary"


def test_promote_asks_the_gate(cast: Cast, serving: Deployment) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    canary = canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=20)
    Canary.objects.filter(pk=canary.pk).update(gate_verdict={"passed": False, "kl": 0.4})
    with pytest.raises(Conflict) as refused:
        canary_services.promote_canary(actor, serving.pk)
    assert refused.value.code == "gate_refused"


def test_abort_leaves_the_target_and_is_recorded(cast: Cast, serving: Deployment) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=20)
    canary = canary_services.abort_canary(actor, serving.pk, reason="looks off")
    serving.refresh_from_db()
    assert canary.status == CanaryStatus.ABORTED and canary.reason == "looks off"
    assert serving.target_revision.number == 1
    event = serving.events.get(reason="CanaryAborted")
    assert "looks off" in event.message and "revision 1 serves all requests" in event.message
    # A new canary may start once the last one ended.
    canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=5)


def test_edits_wait_for_the_canary_and_a_rollback_ends_it(cast: Cast, serving: Deployment) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    canary = canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=20)
    with pytest.raises(Conflict) as edit:
        services.update_settings(
            actor, serving.pk, spec=fp8(BF16, PLINTH_SIM_X="1"), base_revision=2
        )
    assert edit.value.code == "canary_running"
    services.rollback(actor, serving.pk, to_revision=1)
    canary.refresh_from_db()
    assert canary.status == CanaryStatus.ABORTED and "rolled back" in canary.reason


def test_the_canary_quota_counts_on_top_of_the_endpoint(cast: Cast, serving: Deployment) -> None:
    Quota.objects.create(organization=cast.acme, gpus=1)
    with pytest.raises(quotas.QuotaExceeded):
        canary_services.start_canary(
            cast.actor(cast.dave, cast.acme), serving.pk, spec=fp8(), weight=20
        )
    assert not Canary.objects.exists()


def test_other_organizations_see_no_canary(cast: Cast, serving: Deployment) -> None:
    from controlplane.access import NotFound

    with pytest.raises(NotFound):
        canary_services.start_canary(
            cast.actor(cast.bob, cast.globex), serving.pk, spec=fp8(), weight=5
        )
    assert Role.DEVELOPER


def test_the_watcher_aborts_a_canary_whose_pool_never_became_ready(
    cast: Cast, serving: Deployment, settings: object
) -> None:
    from datetime import timedelta

    from deployments.experiments.tasks import watch_canaries

    settings.PLINTH_STARTUP_WINDOW_S = 60  # type: ignore[attr-defined]
    actor = cast.actor(cast.dave, cast.acme)
    canary = canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=20)
    soon = (canary.started_at + timedelta(seconds=30)).isoformat()
    assert watch_canaries(soon) == {"checked": 0, "aborted": 0}
    later = (canary.started_at + timedelta(seconds=61)).isoformat()
    assert watch_canaries(later) == {"checked": 0, "aborted": 1}
    canary.refresh_from_db()
    assert canary.status == CanaryStatus.ABORTED
    assert "no replica ready within its startup window (60 s)" in canary.reason
    assert serving.events.get(reason="CanaryAborted").level == "error"


def test_an_endpoint_with_canaries_is_deleted_whole(cast: Cast, serving: Deployment) -> None:
    from deployments.endpoints import reconcile

    actor = cast.actor(cast.dave, cast.acme)
    canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=20)
    canary_services.abort_canary(actor, serving.pk)
    canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=10)
    services.delete_deployment(actor, serving.pk)
    assert reconcile.finalize_deletion(serving.pk)
    assert not Deployment.objects.filter(pk=serving.pk).exists()
    assert not Canary.objects.exists()


def test_the_route_table_knows_the_adapters_of_the_canarys_revision(
    cast: Cast, serving: Deployment
) -> None:
    """What the gateway splits by (``gateway.split``): the canary's own adapters, not the serving
    revision's."""
    actor = cast.actor(cast.dave, cast.acme)
    adapters = [{"name": "legal", "source": "acme/legal-lora", "rank": 8},
                {"name": "sql", "source": "acme/sql-lora", "rank": 8}]  # fmt: skip
    lora = {"max_lora_rank": 16, "target_modules": ["q_proj", "v_proj"]}
    tuned = {**BF16, "lora": {**lora, "adapters": adapters}}
    services.update_settings(actor, serving.pk, spec=tuned, base_revision=1)
    mark_serving(Deployment.objects.get(pk=serving.pk))  # revision 2 serves
    canary_spec = {**fp8(BF16), "lora": {**lora, "adapters": adapters[:1]}}
    canary_services.start_canary(actor, serving.pk, spec=canary_spec, weight=50)
    Canary.objects.filter(deployment=serving).update(router_url="http://canary", ready_replicas=1)
    endpoint = load_endpoints([str(serving.pk)])["chat"]
    assert endpoint.adapters == {"legal", "sql"}
    assert endpoint.canary is not None and endpoint.canary.adapters == {"legal"}
    assert Splitter().pick(endpoint, pin=endpoint.canary.revision, adapter="sql")[2] is False
