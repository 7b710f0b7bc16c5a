"""The stored status column is ``derive_status`` of the row's facts, whoever wrote them and
however; so filtering by status in SQL selects exactly the endpoints Python would.

Properties over any facts a row can hold (hypothesis), written the ways writers write them: a
queryset UPDATE (reconcile, the probe, tests' stand-ins), a model save (services), a bulk
create (seeding), then compared with the pure function on the row read back.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.access import system_actor
from deployments.endpoints import queries, services
from deployments.endpoints.models import Deployment, Revision
from deployments.status import ALL_STATUSES, derive_status
from tests.conftest import Cast
from tests.fixtures.endpoints import small_spec

pytestmark = pytest.mark.django_db
EARLIER = datetime(2025, 1, 1, tzinfo=UTC)
EXAMPLES = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

revision_numbers = st.none() | st.integers(min_value=1, max_value=3)


@st.composite
def replica(draw: st.DrawFn) -> dict[str, Any]:
    ready = draw(st.booleans())
    return {
        "name": f"r-{draw(st.integers(0, 99))}",
        "role": draw(st.sampled_from(["engine", "engine", "router", "prefill", "decode"])),
        "revision": draw(st.integers(min_value=1, max_value=3)),
        "phase": "ready" if ready else draw(st.sampled_from(["loading", "pending", "failed"])),
        "ready": ready,
    }


@st.composite
def row_facts(draw: st.DrawFn) -> dict[str, Any]:
    """Values for every fact column (revision numbers stand for the revisions)."""
    generation = draw(st.integers(min_value=1, max_value=4))
    return {
        "desired_state": draw(st.sampled_from(["running", "running", "stopped", "deleted"])),
        "desired_replicas": draw(st.integers(min_value=0, max_value=3)),
        "target_revision": draw(st.integers(min_value=1, max_value=3)),
        "applied_revision": draw(revision_numbers),
        "current_revision": draw(revision_numbers),
        "ready_replicas": draw(st.integers(min_value=0, max_value=3)),
        "total_replicas": draw(st.integers(min_value=0, max_value=3)),
        "replica_facts": draw(st.lists(replica(), max_size=4)),
        "first_ready_at": draw(st.none() | st.just(EARLIER)),
        "failed_at": draw(st.none() | st.just(EARLIER)),
        "rollout_started_at": draw(st.none() | st.just(EARLIER)),
        "generation": generation,
        "observed_generation": draw(st.integers(min_value=0, max_value=generation)),
    }


@pytest.fixture
def revised_endpoint(cast: Cast) -> Deployment:
    """An endpoint with revisions 1, 2 and 3."""
    actor = cast.actor(cast.alice, cast.acme)
    made = services.create_deployment(actor, slug="chat", name="c", spec=small_spec())
    for n in (1, 2):
        spec = small_spec()
        spec["model"]["served_name"] = f"chat-{n}"
        services.update_settings(actor, made.pk, spec=spec, base_revision=n)
    return made


def as_columns(endpoint: Deployment, facts: dict[str, Any]) -> dict[str, Any]:
    revisions = {r.number: r for r in Revision.objects.filter(deployment=endpoint)}
    return {
        name: revisions.get(value) if name.endswith("revision") else value
        for name, value in facts.items()
    }


def stored_and_derived(endpoint: Deployment) -> tuple[str, str]:
    row = Deployment.objects.get(pk=endpoint.pk)
    return row.status, derive_status(row.facts())


def test_an_update_of_any_facts_stores_the_derived_status(revised_endpoint: Deployment) -> None:
    @EXAMPLES
    @given(row_facts())
    def check(facts: dict[str, Any]) -> None:
        Deployment.objects.filter(pk=revised_endpoint.pk).update(
            **as_columns(revised_endpoint, facts)
        )
        stored, derived = stored_and_derived(revised_endpoint)
        assert stored == derived
        # ... and SQL finds it under that status and no other.
        for status in ALL_STATUSES:
            found = Deployment.objects.filter(pk=revised_endpoint.pk, status=status).exists()
            assert found == (status == derived)

    check()


def test_a_save_of_any_facts_stores_the_derived_status(revised_endpoint: Deployment) -> None:
    @EXAMPLES
    @given(row_facts(), st.booleans())
    def check(facts: dict[str, Any], some_fields: bool) -> None:
        row = Deployment.objects.get(pk=revised_endpoint.pk)
        for name, value in as_columns(revised_endpoint, facts).items():
            setattr(row, name, value)
        # As services save: naming the fields they wrote (the status is added to them).
        row.save(update_fields=list(facts) if some_fields else None)
        assert stored_and_derived(revised_endpoint)[0] == stored_and_derived(revised_endpoint)[1]

    check()


def test_a_conditional_update_that_matches_no_row_leaves_the_status_alone(
    revised_endpoint: Deployment,
) -> None:
    before = Deployment.objects.get(pk=revised_endpoint.pk)
    stale = Deployment.objects.filter(pk=revised_endpoint.pk, generation=before.generation + 1)
    assert stale.update(desired_state="stopped") == 0
    assert Deployment.objects.get(pk=revised_endpoint.pk).status == before.status


def test_the_api_status_filter_runs_in_sql_and_agrees_with_the_derived_status(
    cast: Cast, revised_endpoint: Deployment
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    others = [
        services.create_deployment(actor, slug=f"ep-{i}", name="e", spec=small_spec())
        for i in range(4)
    ]
    services.stop(actor, others[0].pk)
    Deployment.objects.filter(pk=others[1].pk).update(failed_at=EARLIER)
    derived: dict[str, set[str]] = {}
    for row in Deployment.objects.filter(organization=cast.acme):
        derived.setdefault(derive_status(row.facts()), set()).add(row.slug)
    for status in ALL_STATUSES:
        page = queries.list_deployments(actor, status=status, limit=200)
        assert {d.slug for d in page.items} == derived.get(status, set()), status
        assert page.count == len(derived.get(status, set()))


def test_rows_created_in_bulk_carry_their_derived_status(cast: Cast) -> None:
    actor = system_actor(cast.acme)
    model = services.create_deployment(
        cast.actor(cast.alice, cast.acme), slug="model", name="m", spec=small_spec()
    )
    rows = Deployment.objects.bulk_create(
        [
            Deployment(
                organization=actor.organization,
                slug=f"bulk-{i}",
                name="b",
                cluster=model.cluster,
                desired_state=state,
            )
            for i, state in enumerate(["running", "stopped"])
        ]
    )
    for row in rows:
        stored, derived = stored_and_derived(row)
        assert stored == derived
