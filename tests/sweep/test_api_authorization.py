"""The authorization sweep of /api/v1, generated from the OpenAPI document.

Every documented operation is called by every kind of caller (``tests.sweep.world.CALLERS``):
Acme's management keys and members' sessions of every role, another organization's key and
session, an inference key, a person in no organization, sessions without the CSRF token, and
nobody. Each answer is judged against the README's role matrix (``tests.sweep.matrix``):

- the expected status (the documented 2xx, 403 below the role, 404 for another organization's
  objects, 401 without credentials), never a 5xx, errors in the one error shape;
- nothing of Acme (names, ids, key prefixes, log lines) in an answer to someone outside it;
- no secret value (tokens, kubeconfig credentials, whole keys, their hashes, ciphertexts) in any
  answer to anyone;
- a refused request changes nothing, and nothing of another organization comes to point at
  Acme's objects.

Each call runs in a savepoint that is rolled back, so every caller meets the same world. A new
route is swept automatically, and fails until ``tests.sweep.matrix.EXPECTED`` classifies it.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from controlplane.access import ROLE_RANK
from deployments.api.app import api
from tests.api.conftest import error_of
from tests.sweep.matrix import EXPECTED, PERSON, STAFF, Scope, Variant
from tests.sweep.world import (
    ACME_ROLES,
    CALLERS,
    INVITEE,
    KEY_CALLERS,
    OTHER_ORG,
    World,
    cross_references,
    foreign,
    leaked,
    state_of,
)

METHODS = ("get", "post", "put", "patch", "delete")
SAFE = frozenset({"GET", "HEAD"})
NO_CREDENTIALS = frozenset({"anonymous", "inference-key", "invitee-session"})


def operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in METHODS
    }


# The cases are generated from the document itself, so a new route is swept with no edit here.
DOCUMENT = api.get_openapi_schema()
OPERATIONS = sorted(operations(DOCUMENT))


def _operation(method: str, path: str) -> dict[str, Any]:
    return DOCUMENT["paths"][path][method.lower()]  # type: ignore[no-any-return]


def _success(method: str, path: str) -> int:
    [code] = [int(c) for c in _operation(method, path)["responses"] if str(c).startswith("2")]
    return code


def _for_a_person(method: str, path: str) -> bool:
    schemes = {name for entry in _operation(method, path)["security"] for name in entry}
    return schemes == {"SignedInUser"}


def test_the_sweep_walks_every_operation_of_the_served_document(db: None) -> None:
    served = Client().get("/api/v1/openapi.json")
    assert served.status_code == 200
    assert operations(served.json()) == set(OPERATIONS)
    unclassified = sorted(set(OPERATIONS) - set(EXPECTED))
    assert not unclassified, f"add these to tests/sweep/matrix.py EXPECTED: {unclassified}"
    stale = sorted(set(EXPECTED) - set(OPERATIONS))
    assert not stale, f"tests/sweep/matrix.py EXPECTED names routes that are gone: {stale}"


def expected_statuses(
    variant: Variant, caller: str, method: str, success: int, person: bool
) -> set[int] | None:
    """The statuses the caller may get; None: its own organization's answer, judged by leaks."""
    if variant.min_role == STAFF:
        return {401} if caller == "anonymous" else {403}  # no caller of the sweep is staff
    if person:
        return _person_route(variant, caller, success)
    if caller in NO_CREDENTIALS or caller == "invitee-session-no-csrf":
        return {401}
    if caller == "owner-session-no-csrf":
        return {403}
    if caller in ACME_ROLES:
        allowed = variant.scope is Scope.PUBLIC or _at_least(ACME_ROLES[caller], variant.min_role)
        return {success} if allowed else {403}
    assert caller in OTHER_ORG, caller
    if variant.scope is Scope.OBJECT:
        return {404} if _at_least(OTHER_ORG[caller], variant.min_role) else {403, 404}
    if variant.scope is Scope.REFERENCE:
        return {403, 404, 422}
    return None


def _person_route(variant: Variant, caller: str, success: int) -> set[int] | None:
    if caller == "anonymous":
        return {401}
    if caller in KEY_CALLERS:
        return {403}  # a key acts for an organization, never for a person
    if caller.endswith("-no-csrf"):
        return {403}
    if caller == "invitee-session":
        return {success}
    return {404} if variant.scope is Scope.OBJECT else None


def _at_least(role: str, minimum: str | None) -> bool:
    assert minimum is not None
    return ROLE_RANK[role] >= ROLE_RANK[minimum]  # type: ignore[index]


def _outsider(caller: str, person: bool) -> bool:
    """Whether the caller may see nothing of the object under test."""
    if person:
        return caller not in ("invitee-session", "invitee-session-no-csrf")
    return caller not in ACME_ROLES and caller != "owner-session-no-csrf"


def _url(path: str, variant: Variant, world: World, *, missing: bool = False) -> str:
    values = variant.path(world)
    if missing:
        values = {name: _missing(name, value, world) for name, value in values.items()}
    url = path.format(**values)
    # A query may name objects of the world: "{name}" takes the path's values (unchanged).
    query = variant.query.format(**variant.path(world)) if variant.query else ""
    return f"{url}?{query}" if query else url


def _missing(name: str, value: str, world: World) -> str:
    """A value of the same shape as ``value`` that names nothing anywhere."""
    if name in ("number", "name"):
        return value  # under a missing endpoint already (a revision, an adapter)
    if value == world.endpoint.slug:
        return "sweep-no-such-endpoint"
    return "2147483647" if value.isdigit() else str(uuid.UUID(int=7))


def like_missing(
    world: World, method: str, path: str, variant: Variant, caller: str, answer: Any
) -> list[str]:
    """Another organization's object must answer exactly as one that does not exist (status and
    body, the named id aside): a difference tells an outsider that it exists."""
    url, body = (
        _url(path, variant, world, missing=True),
        variant.body(world) if variant.body else None,
    )
    with transaction.atomic():
        missing = world.api(caller).request(method, url, body)
        transaction.set_rollback(True)
    text = answer.content.decode(errors="replace")
    for name, value in variant.path(world).items():
        text = text.replace(value, _missing(name, value, world))
    if (answer.status_code, text) == (
        missing.status_code,
        missing.content.decode(errors="replace"),
    ):
        return []
    return [
        f"{method} {_url(path, variant, world)} as {caller}: {answer.status_code} {text[:200]} "
        f"differs from a missing object's {missing.status_code} {missing.content[:200]!r}"
    ]


def sweep_call(
    world: World,
    operation: tuple[str, str],
    variant: Variant,
    caller: str,
    *,
    secrets: list[str],
    before: dict[str, Any],
) -> list[str]:
    """One request in a rolled-back savepoint; every way its answer breaks the rules.
    ``before`` is Acme's state, the same at the start of every savepoint."""
    method, path = operation
    person = _for_a_person(method, path)
    url = _url(path, variant, world)
    body = variant.body(world) if variant.body else None
    sent = url + json.dumps(body)
    with transaction.atomic():
        response = world.api(caller).request(method, url, body)
        after, references = state_of(world), cross_references(world)
        transaction.set_rollback(True)
    status, text = response.status_code, response.content.decode(errors="replace")
    where = f"{method} {url} {json.dumps(body) if body is not None else ''} as {caller}"
    problems = []
    wanted = expected_statuses(variant, caller, method, _success(method, path), person)
    if status >= 500 or (wanted is not None and status not in wanted):
        problems.append(
            f"{where}: answered {status}, expected {sorted(wanted or [])}: {text[:300]}"
        )
    if status >= 400:
        try:
            error_of(response)
        except AssertionError:
            problems.append(f"{where}: {status} outside the error shape: {text[:300]}")
    markers = world.markers() if not person else [str(world.invitation.pk), INVITEE]
    if _outsider(caller, person) and (seen := foreign(text, markers, sent)):
        problems.append(f"{where}: shows {seen} to an outsider ({status})")
    if secret := leaked(text, secrets):
        problems.append(f"{where}: a secret value is in the answer ({status}): {secret}")
    if (status >= 300 or _outsider(caller, person)) and after != before:
        changed = sorted(k for k in after if after[k] != before[k])
        problems.append(f"{where}: answered {status} but changed Acme's {changed}")
    problems += [f"{where}: {ref}" for ref in references]
    if variant.scope is Scope.OBJECT and _outsider(caller, person) and status < 500:
        problems += like_missing(world, method, path, variant, caller, response)
    return problems


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op[0]} {op[1]}")
def test_every_caller_gets_what_the_role_matrix_says(
    world: World, operation: tuple[str, str]
) -> None:
    method, path = operation
    variants = EXPECTED.get(operation)
    assert variants, f"{method} {path} is documented but missing from tests/sweep/matrix.py"
    person = _for_a_person(method, path)
    assert all((v.min_role in (PERSON, STAFF)) == person for v in variants), "auth differs"
    secrets, before = world.secret_values, state_of(world)
    problems = [
        problem
        for variant in variants
        for caller in CALLERS
        if not (caller.endswith("-no-csrf") and method in SAFE)
        for problem in sweep_call(world, operation, variant, caller, secrets=secrets, before=before)
    ]
    assert not problems, "\n".join(problems)
