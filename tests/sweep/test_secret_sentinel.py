"""The secret-sentinel sweep: no secret value in any answer, page, audit row, event, log or argv.

Every secret of the world is a fresh sentinel (``tests.sweep.world``): a model token used by an
endpoint, a kubeconfig's bearer token used by a cluster, an unused secret, the whole management
and inference keys, their hashes and the secrets' ciphertexts. With every logger at DEBUG, the
world is built, secrets are written through the API (accepted and refused), every GET of the
OpenAPI document is called by every role, every console page is opened by its owner, and then
the answers, the audit log, the events and every captured log record are searched for each
value. The launch path is checked as far as the process table: the model token reaches the
driver (it must, for a gated model) but never a command line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

from controlplane.models import AuditEvent
from deployments.drivers import base
from deployments.drivers.kube.render import render_revision
from deployments.drivers.local.driver import LocalDriver, LocalOptions
from deployments.drivers.local.processes import stop_all
from deployments.endpoints.models import DeploymentEvent
from deployments.endpoints.reconcile import revision_plan
from tests.conftest import Cast
from tests.sweep.matrix import EXPECTED
from tests.sweep.test_api_authorization import OPERATIONS
from tests.sweep.test_console_cross_org import HTMX, MISSING, PARAMETERS, ROUTES
from tests.sweep.world import World, build_world, kubeconfig, leaked

READERS = ("owner-session", "admin-key", "developer-key", "viewer-key")
SIM_ENV = {
    "PLINTH_SIM_TIME_SCALE": "200",
    "PLINTH_SIM_DRAIN_TIMEOUT": "2",
    "PLINTH_SIM_COLD_START": "0",
}


class Answers:
    """Every answer of the sweep, for one search at the end."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int, str]] = []

    def add(self, where: str, response: Any) -> None:
        if getattr(response, "streaming", False):
            text = b"".join(response.streaming_content).decode(errors="replace")
        else:
            text = response.content.decode(errors="replace")
        self.seen.append((where, response.status_code, text))


@pytest.fixture
def world(cast: Cast, run_dir: Path) -> World:
    """A world of each test's own: a test here builds one beside the cast under captured logs,
    which the module-wide world (``tests.sweep.conftest``) would already hold."""
    return build_world(cast, run_dir)


def _write_secrets_through_the_api(world: World, answers: Answers, sentinel: str) -> None:
    """Secrets as a careless or hostile admin sends them: accepted, refused, misplaced."""
    admin = world.api("admin-key")
    hostile = kubeconfig(sentinel).replace(
        "users: [{name: u, user: {token:",
        f"users: [{{name: u, user: {{exec: {{command: '{sentinel}'}}, token:",
    )
    writes = [
        ("secrets", {"name": "sweep-sentinel", "value": sentinel}),
        ("secrets", {"name": "Not A Name", "value": sentinel}),
        ("secrets", {"name": "sweep-sentinel", "value": sentinel, "extra": sentinel}),
        ("secrets", {"name": "sweep-hostile-kubeconfig", "value": hostile}),
        ("clusters", {"name": "sweep-hostile", "kubeconfig_secret_id": "sweep-hostile-kubeconfig"}),
        ("clusters", {"name": "sweep-sentinel", "kubeconfig_secret_id": "sweep-sentinel"}),
    ]
    for path, body in writes:
        answers.add(f"POST /api/v1/{path} {sorted(body)}", admin.post(path, body))


def _every_get(world: World, answers: Answers) -> None:
    for method, path in OPERATIONS:
        if method != "GET":
            continue
        for variant in EXPECTED[(method, path)]:
            url = path.format(**variant.path(world))
            url = f"{url}?{variant.query}" if variant.query else url
            for caller in READERS:
                answers.add(f"GET {url} as {caller}", world.api(caller).get(url))
    invitee = world.api("invitee-session")
    answers.add("GET /api/v1/me/invitations as the invitee", invitee.get("me/invitations"))


def _every_page(world: World, answers: Answers) -> None:
    alice = world.sessions["owner-session"]
    for route in ROUTES:
        if route.name in ("logout", "favicon"):
            continue
        values = {p: PARAMETERS[p](world) for p in route.parameters}
        if route.name == "invitation-respond":
            values["invitation_id"] = MISSING["invitation_id"]  # addressed to the invitee
        url = reverse(route.name, kwargs=values)
        query = {"a": 1, "b": 2} if route.name == "endpoint-diff" else {}
        for extra in ({}, HTMX):
            answers.add(f"GET {url} {extra}", alice.get(url, query, **extra))
    invitee = world.sessions["invitee-session"]
    answers.add("GET /invitations/ as the invitee", invitee.get(reverse("invitation-list")))


def _log_text(record: logging.LogRecord) -> str:
    text = logging.Formatter("%(name)s %(levelname)s %(message)s").format(record)
    return f"{text} {record.args!r} {getattr(record, 'request', '')!r}"


def test_no_secret_reaches_an_answer_a_page_an_audit_row_an_event_or_a_log(
    cast: Cast, run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    world = build_world(cast, run_dir)
    sentinel = f"sweep-sentinel-{world.hf_token[-32:]}"
    answers = Answers()
    _write_secrets_through_the_api(world, answers, sentinel)
    _every_get(world, answers)
    _every_page(world, answers)
    secrets = [*world.secret_values, sentinel]
    problems = [
        f"{where} ({status}): {found}"
        for where, status, text in answers.seen
        if (found := leaked(text, secrets))
    ]
    problems += [
        f"{where}: answered {status}" for where, status, _ in answers.seen if status >= 500
    ]
    audit = str(list(AuditEvent.objects.values()))
    events = str(list(DeploymentEvent.objects.values()))
    problems += [f"the audit log holds {found}" for found in [leaked(audit, secrets)] if found]
    problems += [f"an event holds {found}" for found in [leaked(events, secrets)] if found]
    problems += [
        f"log {record.name} {record.levelname}: {found}"
        for record in caplog.records
        if (found := leaked(_log_text(record), secrets))
    ]
    assert len(answers.seen) > 100 and caplog.records  # the sweep did sweep
    assert not problems, "\n".join(problems)


def _plan(world: World) -> tuple[base.DeploymentRef, base.RevisionPlan]:
    endpoint = world.endpoint
    plan = revision_plan(endpoint, endpoint.revisions.get(pk=endpoint.target_revision_id))
    return base.DeploymentRef(id=str(endpoint.pk), slug=endpoint.slug), plan


def test_the_model_token_reaches_the_driver_but_no_command_line(
    world: World, tmp_path: Path
) -> None:
    ref, plan = _plan(world)
    assert plan.hf_token == world.hf_token  # a gated model needs it
    driver = LocalDriver(LocalOptions(run_dir=tmp_path, env=SIM_ENV, smg="smg"))
    argvs = [driver.engine_argv(role, 30000) for role in plan.plan.roles if role.role != "router"]
    argvs.append(driver.router_argv(plan, 30001, 30002))
    assert not [argv for argv in argvs if leaked(" ".join(argv), [world.hf_token])]
    for obj in render_revision(ref, plan):
        if obj["kind"] == "Secret":
            continue  # the one place the token is written: a Secret in the endpoint's namespace
        assert world.hf_token not in str(obj), obj["kind"]
    # The token reaches whichever container downloads the weights: the engine itself, an init
    # container (a per-node cache) or the download Job (a shared claim), always by reference.
    pod_specs = [
        obj.get("spec", {}).get("template", {}).get("spec", {})
        for obj in render_revision(ref, plan)
    ]
    containers = [
        c
        for spec in pod_specs
        for c in [*spec.get("containers", []), *spec.get("initContainers", [])]
    ]
    env = [e for c in containers for e in c.get("env", []) if e["name"] == "HF_TOKEN"]
    assert env and all("valueFrom" in e and "value" not in e for e in env)


def _processes_of(root: Path) -> Iterator[tuple[int, list[str]]]:
    """(pid, argv) of every process the local driver started for one endpoint: each runs in
    the endpoint's run directory (its environment may be rewritten, its working directory not).
    """
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = (entry / "cwd").resolve(strict=True)
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or another user's
            continue
        if cwd == root.resolve():
            yield int(entry.name), [a.decode(errors="replace") for a in argv if a]


def test_a_started_local_endpoint_keeps_the_token_off_the_process_table(
    world: World, tmp_path: Path
) -> None:
    ref, plan = _plan(world)
    driver = LocalDriver(LocalOptions(run_dir=tmp_path, env=SIM_ENV, stop_grace_s=3))
    try:
        driver.apply(ref, plan)  # spawns the engine and the router; readiness does not matter
        root = tmp_path / ref.id
        started = dict(_processes_of(root))
        assert len(started) >= 2, started  # an engine and the router
        on_argv = {pid: argv for pid, argv in started.items() if world.hf_token in " ".join(argv)}
        assert not on_argv
        logs = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()]
        assert not [text for text in logs if world.hf_token in text]
    finally:
        stop_all(tmp_path, grace_s=3)
    assert not dict(_processes_of(tmp_path / ref.id))
