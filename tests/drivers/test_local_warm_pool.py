"""The local driver's warm pool (``autoscaling.warm_replicas``, issue 29 item 6): scaling down
releases an engine's GPU memory instead of stopping it, and scaling up resumes it. Real
simulated engines behind the real smg router; the engines model their start phase by phase
(``PLINTH_SIM_COLD_START``) so a resume can be told from a start in simulated seconds."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deployments.drivers import base
from deployments.drivers.local.driver import LocalDriver, LocalOptions
from deployments.drivers.local.logfile import line_time
from deployments.drivers.local.processes import ProcessTable
from runtime import launch, startup
from runtime.spec import RuntimeSpec
from tests.drivers.test_local_driver import chat
from tests.drivers.test_local_driver import settle as settle_ref
from tests.waiting import wait_until

REF = base.DeploymentRef(id="5f0c8e0a-0000-4000-8000-0000000000a9", slug="warm-chat")
SIM_ENV = {
    "PLINTH_SIM_TIME_SCALE": "200",
    "PLINTH_SIM_DRAIN_TIMEOUT": "2",
    "PLINTH_SIM_COLD_START": "1",
}
RESUMED = re.compile(r"memory occupation resumed in (?P<s>[\d.]+) s")


def revision(replicas: int, warm: int) -> base.RevisionPlan:
    spec = RuntimeSpec.model_validate(
        {
            "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
            "hardware": {"gpu": "H100-SXM"},
            "autoscaling": {
                "min_replicas": 0,
                "max_replicas": 2,
                "scale_to_zero": True,
                "warm_replicas": warm,
            },
        }
    )
    return base.RevisionPlan.for_spec(spec, launch.plan(spec), number=1, replicas=replicas)


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[LocalDriver]:
    local = LocalDriver(LocalOptions(run_dir=tmp_path, env=SIM_ENV, stop_grace_s=3))
    yield local
    wait_until(lambda: local.delete(REF), "deleted in teardown", timeout=30)


def settle(
    driver: LocalDriver, rev: base.RevisionPlan, check: Callable[[base.Observation], bool]
) -> base.Observation:
    return settle_ref(driver, rev, check, ref=REF)


def engine_pids(driver: LocalDriver) -> dict[str, int]:
    table = ProcessTable(driver.options.run_dir / REF.id)
    return {r.name: r.pid for r in table.records() if r.alive() and r.role != "router"}


def engine_log(driver: LocalDriver) -> list[str]:
    return (driver.options.run_dir / REF.id / "r1-engine-0.log").read_text().splitlines()


def test_the_warm_pool_plan_asks_sglang_for_its_memory_saver() -> None:
    warm = revision(1, warm=1).plan.role("engine")
    cold = revision(1, warm=0).plan.role("engine")
    assert warm is not None and cold is not None
    assert "--enable-memory-saver" in warm.args
    assert "--enable-memory-saver" not in cold.args


def test_scale_to_zero_with_a_warm_pool_releases_then_resumes_the_same_engine(
    driver: LocalDriver,
) -> None:
    up = settle(driver, revision(1, warm=1), lambda o: o.ready_count() == 1 and o.router_ready)
    pid = engine_pids(driver)["r1-engine-0"]

    # Scaled to zero: the process stays, released, out of the router and of the replica count.
    zero = settle(
        driver, revision(0, warm=1), lambda o: [r.phase for r in o.replicas] == ["released"]
    )
    assert engine_pids(driver) == {"r1-engine-0": pid}
    assert zero.engines() == [] and zero.ready_count() == 0
    assert "Released" in {e.reason for e in zero.events}
    assert chat(up.router_url).status_code != 200  # nothing serves

    # Woken: the same process resumes, no new start; it serves again.
    back = settle(driver, revision(1, warm=1), lambda o: o.ready_count() == 1)
    assert engine_pids(driver) == {"r1-engine-0": pid}
    assert back.replicas[0].restarts == 0
    assert "Resumed" in {e.reason for e in back.events}
    wait_until(lambda: chat(back.router_url).status_code == 200, "serving after the resume")

    # In simulated seconds (the engine's own figures) the resume is a fraction of the load and
    # CUDA graph capture it replaced.
    lines = engine_log(driver)
    phases = startup.engine_phases((line, line_time(line)) for line in lines)
    started = phases.seconds[startup.WEIGHTS_LOADED] + phases.seconds[startup.CUDA_GRAPHS_CAPTURED]
    resumed = [float(m["s"]) for line in lines if (m := RESUMED.search(line))]
    assert len(resumed) == 1 and 0 < resumed[0] < started / 4


def test_scaling_down_within_the_warm_pool_releases_the_replica_it_no_longer_routes(
    driver: LocalDriver,
) -> None:
    settle(driver, revision(2, warm=1), lambda o: o.ready_count() == 2 and o.router_ready)
    before = engine_pids(driver)
    down = settle(
        driver,
        revision(1, warm=1),
        lambda o: sorted(r.phase for r in o.replicas) == ["ready", "released"],
    )
    assert engine_pids(driver) == before  # both processes kept
    [released] = [r for r in down.replicas if r.phase == "released"]
    assert released.name == "r1-engine-1" and not released.ready
    assert [r.name for r in down.engines()] == ["r1-engine-0"]
    wait_until(lambda: chat(down.router_url).status_code == 200, "the other one serves")


def test_scale_to_zero_without_a_warm_pool_stops_the_engine(driver: LocalDriver) -> None:
    settle(driver, revision(1, warm=0), lambda o: o.ready_count() == 1 and o.router_ready)
    zero = settle(driver, revision(0, warm=0), lambda o: not o.replicas)
    assert engine_pids(driver) == {}
    assert zero.events == () or "Released" not in {e.reason for e in zero.events}
