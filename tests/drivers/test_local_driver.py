"""The local driver with real processes: simulated engines and the smg router on loopback."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from deployments.drivers import base
from deployments.drivers.local import driver as driver_module
from deployments.drivers.local.driver import LocalDriver, LocalOptions
from deployments.drivers.local.logfile import line_time
from deployments.drivers.local.processes import ProcessRecord, ProcessTable, stop_all
from runtime import launch, startup
from runtime.client import RouterClient
from runtime.spec import RuntimeSpec
from tests.endpoints.processes import processes_of
from tests.waiting import wait_until

REF = base.DeploymentRef(id="5f0c8e0a-0000-4000-8000-000000000001", slug="local-chat")
SIM_ENV = {"PLINTH_SIM_TIME_SCALE": "200", "PLINTH_SIM_DRAIN_TIMEOUT": "2"}
# Most tests here want engines ready at once; a modelled start also stamps the engine's lines on
# its simulated clock, ahead of the wall clock at this time scale.
FAST_ENV = {**SIM_ENV, "PLINTH_SIM_COLD_START": "0"}


def revision(number: int, replicas: int = 1, **env: str) -> base.RevisionPlan:
    spec = RuntimeSpec.model_validate(
        {
            "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
            "hardware": {"gpu": "H100-SXM"},
            "runtime": {"env": env},
        }
    )
    return base.RevisionPlan(number=number, plan=launch.plan(spec), replicas=replicas)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[LocalDriver]:
    local = LocalDriver(LocalOptions(run_dir=tmp_path, env=FAST_ENV, stop_grace_s=3))
    yield local
    wait_until(lambda: local.delete(REF), "deleted in teardown", timeout=30)


def settle(
    driver: LocalDriver,
    rev: base.RevisionPlan,
    check: Callable[[base.Observation], bool],
    ref: base.DeploymentRef = REF,
) -> base.Observation:
    """Apply and observe until ``check`` holds, as reconcile would on each pass."""
    seen: list[base.Observation] = []

    def step() -> bool:
        driver.apply(ref, rev)
        seen.append(driver.observe(ref))
        return check(seen[-1])

    wait_until(step, "settled")
    return seen[-1]


def chat(url: str) -> httpx.Response:
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def pids(driver: LocalDriver) -> dict[str, int]:
    table = ProcessTable(driver.options.run_dir / REF.id)
    return {r.name: r.pid for r in table.records()}


def test_engines_come_up_behind_the_router_and_answer(driver: LocalDriver) -> None:
    observed = settle(
        driver, revision(1, replicas=2), lambda o: o.ready_count() == 2 and o.router_ready
    )
    assert {r.name for r in observed.replicas} == {"r1-engine-0", "r1-engine-1"}
    assert chat(observed.router_url).status_code == 200
    with RouterClient(observed.router_url) as router:
        assert len(router.workers()) == 2
    logs = driver.logs(REF, base.LogQuery(replica="r1-engine-0"))
    assert logs.lines and "r1-engine-0" in logs.lines[0].text
    assert [(s.name, s.role) for s in logs.replicas] == [
        ("r1-engine-0", "engine"),
        ("r1-engine-1", "engine"),
        ("router", "router"),
    ]
    # The start line and the engine's own lines carry their times.
    assert logs.lines[0].ts is not None
    assert any(line.ts for line in logs.lines if "fired up" in line.text)

    # A worker restart: a new driver finds the same processes and starts nothing new.
    before = pids(driver)
    again = LocalDriver(driver.options)
    again.apply(REF, revision(1, replicas=2))
    assert pids(again) == before

    # Scale down to one replica.
    observed = settle(driver, revision(1, replicas=1), lambda o: len(o.replicas) == 1)
    assert observed.replicas[0].name == "r1-engine-0"


def test_a_killed_engine_is_reported_then_restarted(driver: LocalDriver) -> None:
    observed = settle(driver, revision(1), lambda o: o.ready_count() == 1 and o.router_ready)
    pid = pids(driver)["r1-engine-0"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: driver.observe(REF).replicas[0].phase == "failed", "seen as failed")
    failed = driver.observe(REF)
    assert failed.replicas[0].reason == "Exited"
    assert failed.events and failed.events[0].reason == "EngineExited"
    observed = settle(driver, revision(1), lambda o: o.ready_count() == 1)
    assert observed.replicas[0].restarts == 1
    assert pids(driver)["r1-engine-0"] != pid
    wait_until(lambda: chat(observed.router_url).status_code == 200, "answering again")


def test_surge_rollout_then_rollback_keeps_the_old_revision_serving(driver: LocalDriver) -> None:
    observed = settle(driver, revision(1), lambda o: o.ready_count() == 1 and o.router_ready)
    router_url = observed.router_url

    # Revision 2 comes up next to revision 1, which is stopped only once 2 is ready.
    observed = settle(driver, revision(2), lambda o: {r.revision for r in o.replicas} == {2})
    assert observed.ready_count(2) == 1
    assert chat(router_url).status_code == 200

    # Revision 3 never becomes ready: revision 2 keeps serving next to it.
    never = revision(3, PLINTH_SIM_STARTUP_DELAY="3600")
    for _ in range(3):
        driver.apply(REF, never)
    observed = driver.observe(REF)
    assert {(r.revision, r.ready) for r in observed.replicas} == {(2, True), (3, False)}
    assert chat(router_url).status_code == 200

    # Rolling back is applying revision 2 again: revision 3 goes away.
    observed = settle(driver, revision(2), lambda o: {r.revision for r in o.replicas} == {2})
    assert chat(router_url).status_code == 200


def test_delete_stops_every_process(driver: LocalDriver) -> None:
    settle(driver, revision(1), lambda o: o.ready_count() == 1 and o.router_ready)
    started = list(pids(driver).values())
    wait_until(lambda: driver.delete(REF), "deleted")
    for pid in started:
        assert (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
        )
    assert driver.observe(REF).empty


def test_engines_do_not_inherit_the_control_planes_secrets(
    driver: LocalDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real environment variables of this process, which the worker would have.
    monkeypatch.setenv("SECRET_KEY", "control-plane-secret-key")
    monkeypatch.setenv("PLINTH_ENCRYPTION_KEY", "control-plane-fernet-key")
    settle(driver, revision(1), lambda o: o.ready_count() == 1 and o.router_ready)
    for pid in pids(driver).values():
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert b"control-plane-secret-key" not in environ
        assert b"control-plane-fernet-key" not in environ
        assert b"DATABASE_URL=" not in environ


def test_a_gated_models_token_reaches_engines_in_their_environment_only(
    driver: LocalDriver,
) -> None:
    token = "hf_gatedModelToken0123456789"
    gated = dataclasses.replace(revision(1), hf_token=token)
    settle(driver, gated, lambda o: o.ready_count() == 1 and o.router_ready)
    table = ProcessTable(driver.options.run_dir / REF.id)
    for record in table.records():
        environ = Path(f"/proc/{record.pid}/environ").read_bytes().split(b"\0")
        # Engines download the weights; the router never needs the token.
        assert (f"HF_TOKEN={token}".encode() in environ) == (record.role != "router")
        assert token.encode() not in Path(f"/proc/{record.pid}/cmdline").read_bytes()
    assert all(token not in path.read_text() for path in table.root.glob("*"))


def test_stop_all_stops_every_endpoints_processes(driver: LocalDriver) -> None:
    settle(driver, revision(1), lambda o: o.ready_count() == 1 and o.router_ready)
    started = list(pids(driver).values())
    assert stop_all(driver.options.run_dir, grace_s=5) == len(started) >= 2
    for pid in started:
        assert (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
        )
    # The endpoint is only stopped, not forgotten: applying again brings it back.
    settle(driver, revision(1), lambda o: o.ready_count() == 1 and o.router_ready)


def test_sglang_engine_without_sglang_installed_is_a_permanent_error(tmp_path: Path) -> None:
    import importlib.util

    from deployments.drivers.errors import PermanentDriverError

    if importlib.util.find_spec("sglang") is not None:
        pytest.skip("SGLang is installed here: the refusal cannot be observed")
    local = LocalDriver(LocalOptions(run_dir=tmp_path, engine="sglang"))
    with pytest.raises(PermanentDriverError, match="SGLang is not installed"):
        local.apply(REF, revision(1))
    assert pids(local) == {}


def test_prefill_and_decode_pools_come_up_behind_one_router(driver: LocalDriver) -> None:
    from tests.drivers.reference_specs import load_spec

    spec = load_spec("llama-3.1-70b-pd-h100")
    pd = base.RevisionPlan(number=1, plan=launch.plan(spec), replicas=1)
    observed = settle(
        driver, pd, lambda o: len(o.replicas) == 3 and o.ready_count() == 3 and o.router_ready
    )
    assert sorted(r.role for r in observed.replicas) == ["decode", "decode", "prefill"]
    with RouterClient(observed.router_url) as router:
        types = sorted(w.get("worker_type") for w in router.workers())
    assert types == ["decode", "decode", "prefill"]
    body = {"model": spec.served_model_name, "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(f"{observed.router_url}/v1/chat/completions", json=body, timeout=30)
    assert answer.status_code == 200


def command_lines(run_dir: Path) -> dict[int, str]:
    """What ``ps`` shows of each process working in ``run_dir`` (every one an endpoint runs)."""
    found = {}
    for pid in processes_of(run_dir):
        with contextlib.suppress(OSError):  # gone meanwhile
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


def test_an_endpoint_with_a_key_refuses_callers_without_it_and_lists_it_nowhere(
    tmp_path: Path,
) -> None:
    key = "pek_" + "3c" * 32
    keyed = dataclasses.replace(REF, api_key=key)
    local = LocalDriver(LocalOptions(run_dir=tmp_path, env=FAST_ENV, stop_grace_s=3))
    started = datetime.now(UTC).replace(microsecond=0)  # stamps are whole seconds

    def step() -> base.Observation:
        local.apply(keyed, revision(1))
        return local.observe(keyed)

    try:
        wait_until(lambda: step().ready_count() == 1 and step().router_ready, "keyed and up")
        observed = local.observe(keyed)
        [engine] = observed.replicas
        bearer = {"Authorization": f"Bearer {key}"}
        # Neither the engine nor the router answers a caller without the key...
        assert httpx.get(f"{engine.url}/v1/models", timeout=5).status_code == 401
        assert chat(observed.router_url).status_code == 401
        # ...and the router hands the key on to the engine it was given.
        body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        answer = httpx.post(
            f"{observed.router_url}/v1/chat/completions", json=body, headers=bearer, timeout=30
        )
        assert answer.status_code == 200
        for name in ("r1-engine-0", "router"):
            read = local.logs(keyed, base.LogQuery(replica=name)).lines
            lines = [line.text for line in read]
            assert lines and "--api-key ***" in lines[0]
            assert not [line for line in lines if key in line], name
            # smg's coloured lines come back plain, each at the time it was written.
            assert not [line for line in lines if "\x1b" in line], name
            assert all(line.ts and started <= line.ts <= datetime.now(UTC) for line in read)
        # No local user can read the key off the process table: not the engine's, not smg's
        # (which retitles itself "smg::router" once started, too late to hide its argv).
        listed = command_lines(tmp_path / REF.id)
        assert not [argv for argv in listed.values() if key in argv]
        assert len(listed) == 2 and "--api-key $(PLINTH_API_KEY)" in " ".join(listed.values())
        engine_role = revision(1).plan.roles[0]
        execed = local.engine_argv(engine_role, 1, key) + local.router_argv(revision(1), 2, 3, key)
        assert key not in " ".join(execed)
        table = ProcessTable(tmp_path / REF.id)
        assert key not in "".join(p.read_text() for p in table.root.glob("*.json"))
    finally:
        wait_until(lambda: local.delete(keyed), "deleted", timeout=30)


# A pool worker that starts one process through the process table and then sits idle: it never
# looks at that process again, as a Celery pool process that took no further task would not.
SPAWNER = """
import sys, time
from pathlib import Path
from deployments.drivers.local.processes import ProcessRecord, ProcessTable
table = ProcessTable(Path(sys.argv[1]))
record = ProcessRecord(name="r1-engine-0", role="engine", revision=1, pid=0, port=1,
                       start_ticks=0, config="", started_at=0.0)
table.spawn(record, [sys.executable, "-c", "import time; time.sleep(600)"], {}, table.root)
time.sleep(600)
"""


def _state(pid: int) -> str | None:
    """The process' state letter (Z: exited, not reaped), None once it is gone entirely."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_process_stopped_by_another_worker_leaves_no_zombie(tmp_path: Path) -> None:
    root = tmp_path / "endpoint"
    repo = Path(__file__).resolve().parents[2]
    spawner = subprocess.Popen(
        [sys.executable, "-c", SPAWNER, str(root)], env={**os.environ, "PYTHONPATH": str(repo)}
    )
    try:
        table = ProcessTable(root)
        wait_until(lambda: bool(table.records()), "spawned")
        [record] = table.records()
        assert record.alive() and _state(record.pid) != "Z"
        # This process is not its parent: it can signal it, only the spawner can reap it.
        wait_until(lambda: table.terminate(record, grace_s=3), "stopped")
        wait_until(lambda: _state(record.pid) is None, "reaped by the process that started it")
        assert spawner.poll() is None  # reaped while the spawner lives on, idle
    finally:
        spawner.kill()
        spawner.wait(10)


def _sleeper(cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], cwd=cwd)


def test_a_process_left_without_a_record_is_killed_before_the_next_one_starts(
    tmp_path: Path,
) -> None:
    """A worker killed between starting a process and saving its record leaves it running in the
    run directory with no record; the next spawn there kills it rather than run a duplicate.
    A recorded process and its own children are left alone."""
    root = tmp_path / "endpoint"
    root.mkdir()
    table = ProcessTable(root)
    family = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    )
    kept = ProcessRecord(name="router", role="router", revision=1, pid=0, port=1,
                         start_ticks=0, config="", started_at=0.0)  # fmt: skip
    table.spawn(kept, [sys.executable, "-c", family], {}, root)
    orphan = _sleeper(root)  # started as a killed worker would have left it: no record
    try:
        wait_until(lambda: len(processes_of(root)) == 3, "the router, its child and the orphan")
        engine = dataclasses.replace(kept, name="r1-engine-0", role="engine", pid=0)
        table.spawn(engine, [sys.executable, "-c", "import time; time.sleep(600)"], {}, root)
        wait_until(lambda: orphan.poll() is not None, "the orphan killed")
        assert orphan.returncode == -signal.SIGKILL
        survivors = set(processes_of(root))
        assert kept.pid in survivors and engine.pid in survivors
        assert len(survivors) == 3  # the router's own child too
    finally:
        orphan.kill()
        orphan.wait(10)
        for pid in processes_of(root):  # the router, its child and the engine
            os.kill(pid, signal.SIGKILL)


def test_stop_all_also_stops_a_process_left_without_a_record(tmp_path: Path) -> None:
    """``make run``'s shutdown stops what a worker killed mid-spawn left unrecorded: no later
    spawn may come to kill it, so the stop does (with the recorded ones and their children)."""
    root = tmp_path / "endpoint"
    root.mkdir()
    table = ProcessTable(root)
    family = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"
    )
    kept = ProcessRecord(name="router", role="router", revision=1, pid=0, port=1,
                         start_ticks=0, config="", started_at=0.0)  # fmt: skip
    table.spawn(kept, [sys.executable, "-c", family], {}, root)
    orphan = _sleeper(root)
    try:
        wait_until(lambda: len(processes_of(root)) == 3, "the router, its child and the orphan")
        assert stop_all(tmp_path, grace_s=5) >= 2
        wait_until(lambda: orphan.poll() is not None, "the orphan stopped")
        wait_until(lambda: processes_of(root) == [], "nothing left in the run directory")
    finally:
        orphan.kill()
        orphan.wait(10)
        for pid in processes_of(root):
            os.kill(pid, signal.SIGKILL)


def test_a_simulated_engine_models_its_start_phase_by_phase_by_default(tmp_path: Path) -> None:
    """Issue 29: the local cluster's simulated engines load and capture CUDA graphs in their
    modelled (simulated) time unless told not to, so the endpoint page's start bars are real."""
    assert "PLINTH_SIM_COLD_START" not in os.environ  # nothing here asks for it
    driver = LocalDriver(LocalOptions(run_dir=tmp_path, env=SIM_ENV, stop_grace_s=3))
    try:
        settle(driver, revision(1), lambda o: o.ready_count() == 1)
        log = (tmp_path / REF.id / "r1-engine-0.log").read_text().splitlines()
    finally:
        wait_until(lambda: driver.delete(REF), "deleted", timeout=30)
    phases = startup.engine_phases((line, line_time(line)) for line in log)
    assert phases.seconds[startup.WEIGHTS_LOADED] > 0
    assert phases.seconds[startup.CUDA_GRAPHS_CAPTURED] > 0


def test_a_router_whose_port_was_taken_meanwhile_is_started_again_on_new_ports(
    driver: LocalDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """free_port() only finds a port free: another process can bind it before smg does (seen
    with three test processes on one machine). The pass starts the router again on new ports
    instead of failing until the next one. ``free_port`` is patched only to make that race happen
    on demand (a real socket holds the port; smg really fails to bind it): the race itself cannot
    be timed from outside."""
    first = settle(driver, revision(1), lambda o: o.router_ready and o.ready_count() == 1)
    table = ProcessTable(driver.options.run_dir / REF.id)
    router = next(r for r in table.records() if r.role == "router")
    os.kill(router.pid, signal.SIGKILL)  # the next pass starts it again, on a port taken by then
    wait_until(lambda: not router.alive(), "the router gone")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    ports = iter([port])
    real = driver_module.free_port
    monkeypatch.setattr(driver_module, "free_port", lambda: next(ports, None) or real())
    with contextlib.closing(taken):
        driver.apply(REF, revision(1))  # raised "the router exited right after starting"
        observed = driver.observe(REF)
    assert observed.router_ready and observed.router_url != first.router_url
    assert not observed.router_url.endswith(f":{port}")
