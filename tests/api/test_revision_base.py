"""Optimistic concurrency of an endpoint's settings over any sequence of the writers of revisions.

A person edits what the endpoint reports: its ``target_revision`` and that revision's ``spec``.
Whatever came before (edits, ``plinth apply``'s compare-then-save, rollbacks, the optimizer's
apply, canaries started, promoted, aborted by hand or by the watcher), a client that reloads the
endpoint and sends the reported revision as ``base_revision`` has its change made (while a
canary runs, every edit is refused as ``canary_running`` instead: it says what to do), and a
client sending any other number is refused with 409 ``revision_conflict``.

Hypothesis draws the sequences (a rule-based state machine). Each runs inside a savepoint that is
rolled back after it, so every sequence starts from the same fresh endpoint.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck
from hypothesis import settings as examples
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from controlplane.access import Actor
from controlplane.services import Conflict
from deployments.endpoints import recommend, services
from deployments.endpoints.models import Deployment
from deployments.experiments.models import Canary, CanaryStatus
from deployments.experiments.tasks import watch_canaries
from runtime.spec import RuntimeSpec
from tests.api.conftest import SPEC, Clients, error_of, spec_with
from tests.conftest import Cast
from tests.experiments.canary.helpers import mark_serving

pytestmark = pytest.mark.django_db
STARTUP_WINDOW_S = 60
SETTINGS = [
    *(spec_with(batching={"max_running_requests": n}) for n in (8, 64)),
    spec_with(quantization={"method": "fp8"}),
    SPEC,
]
settings_drawn = st.sampled_from(SETTINGS)
NEVER_SAVED = spec_with(batching={"max_running_requests": 4})  # what stale bases send


class RevisionWriters(RuleBasedStateMachine):
    """One endpoint, ``chat``, changed by every writer of revisions in any order."""

    api: Clients
    actor: Actor

    def __init__(self) -> None:
        super().__init__()
        self.savepoint = transaction.atomic()
        self.savepoint.__enter__()
        services.create_deployment(self.actor, slug="chat", name="Chat", spec=SPEC)
        self.canary_running = False  # the model's own account, not read from the database
        self.reported: list[int] = [1]  # every target_revision the endpoint reported, in order

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self.savepoint.__exit__(None, None, None)

    # --- the writers ---------------------------------------------------------------------------

    @rule(spec=settings_drawn)
    def edit_after_reloading(self, spec: dict[str, Any]) -> None:
        base = self.api.dave.get("deployments/chat").json()["target_revision"]
        self._expect_saved(self._patch(spec, base))

    @rule(spec=settings_drawn)
    def apply_as_plinth_apply_does(self, spec: dict[str, Any]) -> None:
        plan = self.api.dave.post("validate", {"spec": spec, "deployment": "chat"}).json()
        labels = {"plinth.dev/managed-by": "ci"}
        self._expect_saved(self._patch(spec, plan["target_revision"], labels=labels))

    @rule(data=st.data())
    def roll_back(self, data: st.DataObject) -> None:
        newest = self._endpoint().revisions.count()
        to = data.draw(st.integers(min_value=1, max_value=newest), label="to_revision")
        answer = self.api.dave.post("deployments/chat/rollback", {"to_revision": to})
        assert answer.status_code == 200, answer.content
        self.canary_running = False  # a rollback aborts a running canary with it

    @rule(spec=settings_drawn)
    def apply_the_optimizers_pick(self, spec: dict[str, Any]) -> None:
        try:
            recommend.apply_candidate(self.actor, "chat", spec, "a candidate")
        except Conflict as refused:
            assert self.canary_running and refused.code == "canary_running"
        else:
            assert not self.canary_running

    @rule(spec=settings_drawn)
    def start_a_canary(self, spec: dict[str, Any]) -> None:
        endpoint = mark_serving(self._endpoint())  # reconcile has rolled the target out
        answer = self.api.dave.post("deployments/chat/canary", {"spec": spec, "weight": 10})
        if self.canary_running:
            assert answer.status_code == 409 and error_of(answer)["code"] == "canary_running"
        elif RuntimeSpec.model_validate(spec).content_hash() == endpoint.target_revision.spec_hash:
            assert answer.status_code == 422 and error_of(answer)["code"] == "unchanged"
        else:
            assert answer.status_code == 201, answer.content
            self.canary_running = True

    @rule()
    def promote_the_canary(self) -> None:
        self._end_canary(self.api.dave.post("deployments/chat/canary/promote", {}))

    @rule()
    def abort_the_canary(self) -> None:
        self._end_canary(self.api.dave.post("deployments/chat/canary/abort", {}))

    @rule()
    def let_the_watcher_abort_the_canary(self) -> None:
        canary = Canary.objects.filter(status=CanaryStatus.RUNNING).first()
        assert (canary is not None) == self.canary_running
        if canary is not None:  # its pool never became ready within the startup window
            later = canary.started_at + timedelta(seconds=STARTUP_WINDOW_S + 1)
            assert watch_canaries(later.isoformat())["aborted"] == 1
            self.canary_running = False

    # --- what must hold after each of them -----------------------------------------------------

    @invariant()
    def the_reported_revision_is_the_base_and_no_other(self) -> None:
        detail = self.api.carol.get("deployments/chat").json()
        target = detail["target_revision"]
        assert target >= self.reported[-1], "the reported base went back"
        shown = self.api.carol.get(f"deployments/chat/revisions/{target}").json()
        assert shown["spec"] == detail["spec"] and shown["is_target"]
        # Saving what is shown, on the reported base: passes the check (and changes nothing).
        same = self._patch(detail["spec"], target)
        self._expect_saved(same)
        if same.status_code == 200:
            assert (same.json()["target_revision"], same.json()["generation"]) == (
                target,
                detail["generation"],
            )
        # Any other number is refused, and a change sent on it saves nothing: the base reported
        # before, the newest revision (an aborted canary's, say), one not made yet.
        newest = self._endpoint().revisions.count()
        for stale in {self.reported[-1], newest, target + 1} - {target}:
            self._expect_refused(self._patch(NEVER_SAVED, stale))
        assert self._endpoint().revisions.count() == newest
        self.reported.append(target)

    # --- steps -----------------------------------------------------------------------------------

    def _endpoint(self) -> Deployment:
        return Deployment.objects.select_related("target_revision").get(slug="chat")

    def _patch(self, spec: dict[str, Any], base: int, **extra: Any) -> Any:
        body = {"spec": spec, "base_revision": base, **extra}
        return self.api.dave.patch("deployments/chat", body)

    def _expect_saved(self, answer: Any) -> None:
        if self.canary_running:
            assert answer.status_code == 409 and error_of(answer)["code"] == "canary_running"
        else:
            assert answer.status_code == 200, answer.content

    def _expect_refused(self, answer: Any) -> None:
        assert answer.status_code == 409, answer.content
        code = "canary_running" if self.canary_running else "revision_conflict"
        assert error_of(answer)["code"] == code

    def _end_canary(self, answer: Any) -> None:
        if self.canary_running:
            assert answer.status_code == 200, answer.content
            self.canary_running = False
        else:
            assert answer.status_code == 409 and error_of(answer)["code"] == "no_canary"


def test_any_sequence_of_revision_writers_keeps_the_reported_revision_the_base(
    api: Clients, cast: Cast, settings: Any
) -> None:
    settings.PLINTH_STARTUP_WINDOW_S = STARTUP_WINDOW_S
    RevisionWriters.api = api
    RevisionWriters.actor = cast.actor(cast.dave, cast.acme)
    run_state_machine_as_test(
        RevisionWriters,
        settings=examples(
            max_examples=20,
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
