"""Cost per team (issue 30 item 4): GET /costs prices the replica timeline (a span per engine
replica, written by reconcile's writer) by the operator's GPU price list and the cluster's price
factor, by endpoint and revision or by key (each hour split by the keys' share of its tokens,
the rest idle/unattributed); the rows add up to the GPU-hours, a month boundary splits a span,
another organization's figures never show, and bad input is a 4xx naming the field."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.test import Client

from controlplane import services as platform
from deployments.clusters.models import ClusterKind
from deployments.costs import spans
from deployments.costs.models import ReplicaSpan
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.experiments.models import Canary, CanaryStatus
from deployments.status import ACTIVE
from deployments.traffic.models import UsageRecord
from runtime.catalog.gpus import get_gpu
from tests.api.conftest import Clients, error_of
from tests.conftest import Cast
from tests.fixtures.endpoints import refresh, small_spec
from tests.waiting import wait_until

T0 = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
H100 = get_gpu("H100-SXM").price_per_gpu_hour


def _replica(name: str, revision: int = 1, phase: str = "ready") -> dict[str, object]:
    return {"name": name, "revision": revision, "role": "engine", "phase": phase, "ready": True}


def _run(endpoint: Deployment, replicas: list[str], start: datetime, end: datetime) -> None:
    """``replicas`` of ``endpoint`` held their GPUs from ``start`` to ``end``, as two reconcile
    passes record them."""
    spans.record_spans(endpoint, [_replica(n) for n in replicas], start)
    spans.record_spans(endpoint, [], end)


def _tokens(cast: Cast, endpoint: Deployment, name: str, at: datetime, tokens: int) -> None:
    key = platform.create_api_key(cast.actor(cast.dave, cast.acme), name=name, kind="inference")
    UsageRecord.objects.create(
        organization=cast.acme,
        api_key=key.api_key,
        deployment_id=endpoint.pk,
        deployment_slug=endpoint.slug,
        minute=at,
        prompt_tokens=tokens - 10,
        completion_tokens=10,
    )


@pytest.mark.django_db
def test_the_rows_add_up_to_the_gpu_hours(api: Clients, endpoint: Deployment, cast: Cast) -> None:
    _run(endpoint, ["chat-0", "chat-1"], T0, T0 + timedelta(hours=3, minutes=20))
    _tokens(cast, endpoint, "app", T0 + timedelta(minutes=5), 1000)
    gpu_hours = 2 * (3 + 20 / 60)  # two one-GPU replicas

    by_endpoint = api.carol.get("costs?by=endpoint&month=2026-11").json()
    assert by_endpoint["gpu_hours"] == pytest.approx(gpu_hours, rel=0.01)
    assert by_endpoint["cost"] == pytest.approx(gpu_hours * H100, rel=0.01)
    [row] = by_endpoint["rows"]
    assert (row["endpoint"], row["revision"]) == ("chat", 1)
    by_key = api.carol.get("costs?by=key&month=2026-11").json()
    assert sum(r["gpu_hours"] for r in by_key["rows"]) == pytest.approx(gpu_hours, rel=0.01)
    assert sum(r["cost"] for r in by_key["rows"]) == pytest.approx(by_endpoint["cost"], rel=0.01)


@pytest.mark.django_db
def test_each_hour_is_attributed_by_the_keys_share_of_its_tokens(
    api: Clients, endpoint: Deployment, cast: Cast
) -> None:
    _run(endpoint, ["chat-0"], T0, T0 + timedelta(hours=2))
    _tokens(cast, endpoint, "team-a", T0 + timedelta(minutes=1), 300)
    _tokens(cast, endpoint, "team-b", T0 + timedelta(minutes=2), 100)
    # The second hour no key used: idle.

    rows = {r["label"]: r for r in api.carol.get("costs?by=key&month=2026-11").json()["rows"]}
    assert set(rows) == {"team-a", "team-b", "idle/unattributed"}
    assert rows["team-a"]["gpu_hours"] == pytest.approx(0.75)
    assert rows["team-b"]["gpu_hours"] == pytest.approx(0.25)
    assert rows["idle/unattributed"]["gpu_hours"] == pytest.approx(1.0)
    assert rows["idle/unattributed"]["api_key_id"] is None
    assert rows["team-a"]["tokens"] == 300
    assert rows["team-a"]["cost"] == pytest.approx(0.75 * H100)


@pytest.mark.django_db
def test_a_month_boundary_splits_a_span(api: Clients, endpoint: Deployment) -> None:
    night = datetime(2026, 10, 31, 23, 0, tzinfo=UTC)
    _run(endpoint, ["chat-0"], night, night + timedelta(hours=2, minutes=30))

    october = api.carol.get("costs?month=2026-10").json()
    november = api.carol.get("costs?month=2026-11").json()
    assert october["gpu_hours"] == pytest.approx(1.0)
    assert november["gpu_hours"] == pytest.approx(1.5)
    assert october["end"] == november["start"] == "2026-11-01T00:00:00Z"


@pytest.mark.django_db
def test_the_operator_price_list_and_the_cluster_factor_price_it(
    api: Clients, endpoint: Deployment, settings: object
) -> None:
    settings.PLINTH_GPU_PRICES = {"H100-SXM": 3.0}  # type: ignore[attr-defined]
    _run(endpoint, ["chat-0"], T0, T0 + timedelta(hours=2))
    assert api.carol.get("costs?month=2026-11").json()["cost"] == pytest.approx(6.0)
    cluster = endpoint.cluster
    cluster.kind = ClusterKind.KUBERNETES
    cluster.operator_settings = {"gpu_price_factor": 0.5}
    cluster.save()
    assert api.carol.get("costs?month=2026-11").json()["cost"] == pytest.approx(3.0)


@pytest.mark.django_db
def test_another_organizations_figures_never_show(
    api: Clients, endpoint: Deployment, cast: Cast
) -> None:
    _run(endpoint, ["chat-0"], T0, T0 + timedelta(hours=2))
    _tokens(cast, endpoint, "app", T0, 100)
    for by in ("endpoint", "key"):
        body = api.bob.get(f"costs?by={by}&month=2026-11").json()
        assert body["rows"] == [] and body["gpu_hours"] == 0
    assert "chat" not in api.bob.get("costs?month=2026-11&format=csv").content.decode()
    assert api.carol.get("costs?month=2026-11").json()["gpu_hours"] == pytest.approx(2.0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("by=team", "by"),
        ("month=2026-13", "month"),
        ("month=november", "month"),
        ("month=2026-11&format=xml", "format"),
    ],
)
def test_bad_input_is_refused_naming_the_field(api: Clients, query: str, field: str) -> None:
    response = api.carol.get(f"costs?{query}")
    assert response.status_code == 422
    assert [f["field"] for f in error_of(response)["fields"]] == [field]


@pytest.mark.django_db
def test_the_report_exports_as_csv(api: Clients, endpoint: Deployment) -> None:
    _run(endpoint, ["chat-0"], T0, T0 + timedelta(hours=2))
    for response in (
        api.carol.get("costs?month=2026-11&format=csv"),
        api.carol.get("costs?month=2026-11", Accept="text/csv"),
    ):
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/csv")
        [row] = list(csv.DictReader(io.StringIO(response.content.decode())))
        assert row["label"] == "chat r1" and float(row["gpu_hours"]) == pytest.approx(2.0)


@pytest.mark.django_db
def test_the_writer_opens_once_and_a_later_pass_closes_what_it_no_longer_sees(
    endpoint: Deployment,
) -> None:
    """After a crash nothing is remembered but the spans: the next pass compares with them."""
    spans.record_spans(endpoint, [_replica("chat-0"), _replica("p", phase="pending")], T0)
    spans.record_spans(endpoint, [_replica("chat-0"), _replica("chat-1")], T0 + timedelta(1))
    spans.record_spans(endpoint, None, T0 + timedelta(2))  # a pass that saw nothing: no change
    rows = ReplicaSpan.objects.filter(deployment_id=endpoint.pk).order_by("replica")
    assert [(s.replica, s.ended_at, s.gpus, s.gpu) for s in rows] == [
        ("chat-0", None, 1, "H100-SXM"),
        ("chat-1", None, 1, "H100-SXM"),
    ]
    spans.record_spans(endpoint, [_replica("chat-1")], T0 + timedelta(3))
    closed = ReplicaSpan.objects.get(deployment_id=endpoint.pk, replica="chat-0")
    assert closed.ended_at == T0 + timedelta(3)


@pytest.mark.django_db
def test_a_running_canarys_pool_is_charged_to_its_revision(endpoint: Deployment) -> None:
    """A canary's replicas hold GPUs beside the endpoint's own; once it ends they stop costing."""
    baseline = endpoint.revisions.get(number=1)
    spec = {**baseline.spec, "hardware": {**baseline.spec["hardware"], "gpus_per_replica": 2}}
    tried = endpoint.revisions.create(number=2, spec=spec, spec_hash="canary-2", author_label="t")
    canary = Canary.objects.create(
        deployment=endpoint, revision=tried, baseline_revision=baseline, weight=10,
        replica_facts=[_replica("canary-0", revision=2)],
    )  # fmt: skip
    spans.record_spans(endpoint, [_replica("chat-0")], T0)
    rows = ReplicaSpan.objects.filter(deployment_id=endpoint.pk).order_by("replica")
    assert [(s.replica, s.revision, s.gpus, s.ended_at) for s in rows] == [
        ("canary-0", 2, 2, None),
        ("chat-0", 1, 1, None),
    ]
    Canary.objects.filter(pk=canary.pk).update(status=CanaryStatus.ABORTED)
    spans.record_spans(endpoint, [_replica("chat-0")], T0 + timedelta(hours=1))
    ended = ReplicaSpan.objects.get(deployment_id=endpoint.pk, replica="canary-0")
    assert ended.ended_at == T0 + timedelta(hours=1)


@pytest.mark.django_db
def test_reconcile_records_a_running_replica_and_closes_it_once_stopped(
    cast: Cast, fast_local: Path
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    deployment = services.create_deployment(actor, slug="paid", name="Paid", spec=small_spec())

    def active() -> bool:
        reconcile.reconcile(str(deployment.pk))
        return refresh(deployment).status == ACTIVE

    wait_until(active, "active", timeout=90)
    [span] = ReplicaSpan.objects.filter(deployment_id=deployment.pk)
    assert span.ended_at is None and span.revision == 1 and span.gpus >= 1
    services.stop(actor, deployment.pk)

    def closed() -> bool:
        reconcile.reconcile(str(deployment.pk))
        return ReplicaSpan.objects.get(pk=span.pk).ended_at is not None

    wait_until(closed, "the span closed", timeout=60)


@pytest.mark.django_db
def test_the_costs_page_shows_a_bar_per_row(
    client: Client, cast: Cast, endpoint: Deployment
) -> None:
    _run(endpoint, ["chat-0"], T0, T0 + timedelta(hours=2))
    client.force_login(cast.carol)
    page = client.get("/costs/?month=2026-11").content.decode()
    assert "chat r1" in page and 'class="wf-bar"' in page
    assert client.get("/costs/?month=2026-99").status_code == 400
    client.force_login(cast.bob)
    assert "chat r1" not in client.get("/costs/?month=2026-11").content.decode()


@pytest.mark.django_db
def test_a_deleted_endpoints_cost_stays_and_ends_where_it_was_last_seen(
    api: Clients, endpoint: Deployment, cast: Cast
) -> None:
    """Its row is gone (finalized before any pass closed its span): the month still shows what
    it ran, up to the last pass that saw its replica, not up to now."""
    spans.record_spans(endpoint, [_replica("chat-0")], T0)
    spans.record_spans(endpoint, [_replica("chat-0")], T0 + timedelta(hours=1))
    services.delete_deployment(cast.actor(cast.dave, cast.acme), endpoint.pk)
    assert reconcile.finalize_deletion(endpoint.pk)

    [row] = api.carol.get("costs?month=2026-11").json()["rows"]
    assert (row["label"], row["gpu_hours"]) == ("chat r1", pytest.approx(1.0))
