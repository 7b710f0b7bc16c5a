"""A revision stored before Plinth refused its settings fails the endpoint; it never runs.

Issue 12 item 1: extra flags with list values, or flags now on the denylist, were accepted and
stored. Reconciling such a revision must neither start an engine with that argv nor raise on every
pass: the endpoint fails with a reason naming the revision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Revision
from tests.conftest import Cast
from tests.fixtures.endpoints import refresh, small_spec

SMUGGLED: list[dict[str, Any]] = [
    {"--reasoning-parser": ["deepseek-r1", "--enable-custom-logit-processor"]},
    {"--chat-template": "/etc/passwd"},
]


@pytest.mark.django_db
@pytest.mark.parametrize("extra_flags", SMUGGLED)
def test_a_stored_revision_with_smuggled_flags_fails_and_starts_nothing(
    cast: Cast, fast_local: Path, extra_flags: dict[str, Any]
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="chat", name="Chat", spec=small_spec())
    stored = small_spec()
    stored["runtime"]["extra_flags"] = extra_flags
    # As an older Plinth saved it (the services refuse it now).
    Revision.objects.filter(deployment=deployment, number=1).update(spec=stored)

    assert reconcile.reconcile(str(deployment.pk)) is True
    deployment = refresh(deployment)
    assert "revision 1's settings are refused" in deployment.failure_reason
    assert deployment.replica_facts in ([], None, {})
    assert not list(fast_local.glob("*/r1-engine-*.json"))
