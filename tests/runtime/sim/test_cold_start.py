"""The simulated engine's start follows SGLang's phases (issue 29, items 5 and 6): the lines
SGLang logs for them, read back by ``runtime.startup``, with times from the model's size and the
catalogue's figures. Figures are simulated seconds; no test asserts on real timings."""

from __future__ import annotations

from pathlib import Path

import httpx

from deployments.drivers.local.logfile import line_time
from runtime import startup
from runtime.sim.launcher import ManagedProcess, http_get
from tests.runtime.sim.conftest import EngineFactory
from tests.runtime.sim.scrape import metric_sum

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _phases(engine: ManagedProcess) -> startup.EnginePhases:
    lines = engine.log_text().splitlines()
    return startup.engine_phases((line, line_time(line)) for line in lines)


def test_a_cold_engine_downloads_loads_captures_and_warms_up_in_sglangs_words(
    start_sim_engine: EngineFactory, tmp_path: Path
) -> None:
    cache = tmp_path / "weights"
    engine = start_sim_engine(
        model=MODEL, args=["--sim-cold-start", "1", "--download-dir", str(cache)]
    )
    phases = _phases(engine)
    assert phases.downloaded
    # 16 GB at the catalogue's 0.5 GB/s, read at 3 GB/s, 36 graphs x 32 layers, 2 s warm-up.
    assert phases.seconds[startup.WEIGHTS_DOWNLOADED] >= 30
    assert phases.seconds[startup.WEIGHTS_LOADED] > 1
    assert phases.seconds[startup.CUDA_GRAPHS_CAPTURED] > 10
    assert phases.seconds[startup.WARMUP] >= 1
    assert phases.reached == startup.WARMUP
    assert metric_sum(engine.url, "sglang:startup_time_seconds", phase="cuda_graph") > 10


def test_weights_already_in_the_nodes_cache_are_not_fetched_again(
    start_sim_engine: EngineFactory, tmp_path: Path
) -> None:
    args = ["--sim-cold-start", "1", "--download-dir", str(tmp_path / "weights")]
    start_sim_engine(model=MODEL, args=args).stop(timeout=5)
    again = _phases(start_sim_engine(model=MODEL, args=args))
    assert not again.downloaded
    assert startup.WEIGHTS_DOWNLOADED not in again.seconds


def test_trimming_the_captured_batch_sizes_shortens_graph_capture(
    start_sim_engine: EngineFactory,
) -> None:
    full = _phases(start_sim_engine(model=MODEL, args=["--sim-cold-start", "1"]))
    trimmed = _phases(
        start_sim_engine(
            model=MODEL, args=["--sim-cold-start", "1", "--cuda-graph-max-bs-decode", "16"]
        )
    )
    listed = _phases(
        start_sim_engine(
            model=MODEL, args=["--sim-cold-start", "1", "--cuda-graph-bs-decode", "1", "2", "4"]
        )
    )
    graphs = startup.CUDA_GRAPHS_CAPTURED
    assert trimmed.seconds[graphs] < full.seconds[graphs] / 4
    assert listed.seconds[graphs] < trimmed.seconds[graphs]


def test_a_warm_replica_released_and_resumed_skips_the_load_and_the_graphs(
    start_sim_engine: EngineFactory,
) -> None:
    """A warm pool's replica (issue 29 item 6): loaded, then its GPU memory released with
    SGLang's /release_memory_occupation; it takes no requests until /resume_memory_occupation
    copies the weights back, far sooner than a start's load and graph capture."""
    engine = start_sim_engine(model=MODEL, args=["--sim-cold-start", "1"])
    cold = _phases(engine)
    released = httpx.post(f"{engine.url}/release_memory_occupation")
    assert released.status_code == 200 and released.json()["success"]
    assert http_get(f"{engine.url}/ready")[0] == 503
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=chat).status_code == 503
    resumed = httpx.post(f"{engine.url}/resume_memory_occupation", timeout=30)
    assert resumed.status_code == 200
    start = cold.seconds[startup.WEIGHTS_LOADED] + cold.seconds[startup.CUDA_GRAPHS_CAPTURED]
    assert 0 < resumed.json()["seconds"] < start / 4
    assert http_get(f"{engine.url}/ready")[0] == 200
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=chat).status_code == 200
