"""Property-based run of schemathesis against the OpenAPI document, in-process over WSGI: no
request may get a 5xx, and every response must match the documented status codes, content types
and schemas. Bounded (a few examples per operation, derandomized) so it stays well under a minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from controlplane import services as platform
from controlplane.models import Role
from controlplane.wsgi import application
from deployments.endpoints import services
from tests.api.conftest import SPEC
from tests.conftest import Cast

EXAMPLES = 10  # per operation and mode
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def fuzz_target(cast: Cast) -> Iterator[dict[str, Any]]:
    """An admin key and an endpoint to aim path parameters at."""
    owner = cast.actor(cast.alice, cast.acme)
    key = platform.create_api_key(owner, name="fuzz", kind="management", role=Role.ADMIN)
    endpoint = services.create_deployment(owner, slug="fuzzed", name="Fuzzed", spec=SPEC)
    # The WSGI handler would close the test's connection (inside its transaction) at the end
    # of each request, as Django's own test client also prevents.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield {"key": key.plaintext, "deployment": str(endpoint.pk)}
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


# schemathesis' own pytest plugin does not run under pytest 9 (it reads the removed
# Node._nodeid), so each operation's hypothesis strategy is driven here directly.
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors_and_responses_match_the_document(
    fuzz_target: dict[str, Any], mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 30
    for operation in operations:
        _fuzz(operation, mode, fuzz_target)


def _fuzz(operation: Any, mode: GenerationMode, target: dict[str, Any]) -> None:
    # Aim at a real endpoint except when deleting, so edits reach the services, not only 404s.
    fixed = {}
    names = {p.name for p in operation.path_parameters}
    if "deployment_id" in names and operation.method.upper() != "DELETE":
        fixed["deployment_id"] = target["deployment"]
    strategy = operation.as_strategy(
        mode, path_parameters=fixed or None, headers={"Authorization": f"Bearer {target['key']}"}
    )

    @given(case=strategy)
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(checks=CHECKS)

    try:
        run()
    except Unsatisfiable:
        # Negative mode only: an operation whose every input is valid (no body, no bounded
        # parameter) has no invalid request to make. Positive mode never gets here.
        if mode is not GenerationMode.NEGATIVE:
            raise
