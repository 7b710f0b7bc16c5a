"""Fixtures for the simulated engine: real engine and router processes on loopback.

Every process is started through ``runtime.sim.launcher`` and stopped in teardown, including when a
test fails. Engines run at a large time scale so simulated minutes pass in real seconds; no test
asserts on timings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.launch import cache_aware_args, smg_policy
from runtime.sim.launcher import ManagedProcess, SimCluster, start_engine
from runtime.spec import PLINTH_ROUTING

EngineFactory = Callable[..., ManagedProcess]
TIME_SCALE = 100.0


@pytest.fixture
def start_sim_engine(tmp_path: Path) -> Iterator[EngineFactory]:
    """Start engines with ``start_sim_engine(args=[...], **launcher_kwargs)``; all stopped after."""
    started: list[ManagedProcess] = []

    def start(args: Sequence[str] = (), **kwargs: object) -> ManagedProcess:
        kwargs.setdefault("time_scale", TIME_SCALE)
        kwargs.setdefault("log_dir", tmp_path)
        proc = start_engine(args=args, **kwargs)  # type: ignore[arg-type]
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop(timeout=5)


@pytest.fixture(scope="module")
def sim_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ManagedProcess]:
    """One engine shared by a module's tests (each test uses its own prompts)."""
    proc = start_engine(time_scale=TIME_SCALE, log_dir=tmp_path_factory.mktemp("engine"))
    yield proc
    proc.stop(timeout=5)


def _cluster(policy: str, tmp: Path, router_args: Sequence[str] = ()) -> Iterator[SimCluster]:
    with SimCluster(
        engines=2, policy=policy, router_args=router_args, time_scale=TIME_SCALE, log_dir=tmp
    ) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def cache_aware_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    """smg's cache-aware tree with the knobs a deployed endpoint's router gets when its spec
    places by the tree (`routing.placement: first_fit`)."""
    args = cache_aware_args(replace(PLINTH_ROUTING, placement="first_fit"))
    yield from _cluster("cache_aware", tmp_path_factory.mktemp("cache_aware"), args)


@pytest.fixture(scope="module")
def keyed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    """The router of a spec placed by count (`routing.placement: by_count`, the default): it
    sends a request to the replica the gateway names, or one naming none by its routing key."""
    knobs = replace(PLINTH_ROUTING, placement="by_count")
    policy, args = smg_policy("cache_aware", knobs), cache_aware_args(knobs)
    yield from _cluster(policy, tmp_path_factory.mktemp("keyed"), args)


@pytest.fixture(scope="module")
def prefix_hash_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    """smg's prefix_hash policy (a routing.policy a spec may choose), with smg's own knobs."""
    yield from _cluster("prefix_hash", tmp_path_factory.mktemp("prefix_hash"))


@pytest.fixture(scope="module")
def round_robin_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    yield from _cluster("round_robin", tmp_path_factory.mktemp("round_robin"))
