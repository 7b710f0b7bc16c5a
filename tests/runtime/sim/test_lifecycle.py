"""Start-up, graceful drain, auth, fault injection and refusing bad flags, on real processes."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import httpx

from runtime.sim.launcher import REPO_ROOT, ManagedProcess, engine_env, http_get
from tests.runtime.sim.conftest import EngineFactory
from tests.runtime.sim.scrape import metric_sum

CHAT = {"model": "sim", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}


def run_sim(*flags: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "runtime.sim", *flags]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=30, cwd=REPO_ROOT, env=engine_env()
    )


def test_an_engine_is_not_ready_until_its_weights_are_loaded(
    start_sim_engine: EngineFactory,
) -> None:
    engine = start_sim_engine(startup_delay=2.0, wait=False)
    engine.wait_until(lambda: http_get(f"{engine.url}/ready")[0] != 0, 15, "listening")
    assert http_get(f"{engine.url}/ready")[0] == 503
    assert http_get(f"{engine.url}/health")[0] == 503
    generate = httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT)
    assert generate.status_code == 503
    engine.wait_until(lambda: http_get(f"{engine.url}/ready")[0] == 200, 15, "ready")
    assert http_get(f"{engine.url}/health")[0] == 200


def read_stream(url: str, out: dict[str, Any], started: threading.Event) -> None:
    body = {**CHAT, "max_tokens": 150, "ignore_eos": True, "stream": True}
    chunks = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                chunks.append(line[6:])
                started.set()
    out["chunks"] = chunks


def test_sigterm_drains_in_flight_streams_to_completion(start_sim_engine: EngineFactory) -> None:
    # A slow clock (time scale 1) keeps the streams in flight while the signal arrives.
    engine = start_sim_engine(time_scale=1.0)
    results: list[dict[str, Any]] = [{} for _ in range(3)]
    started = [threading.Event() for _ in results]
    threads = [
        threading.Thread(target=read_stream, args=(engine.url, out, ev))
        for out, ev in zip(results, started, strict=True)
    ]
    for thread in threads:
        thread.start()
    for event in started:
        assert event.wait(15)
    engine.signal(signal.SIGTERM)
    engine.wait_until(lambda: http_get(f"{engine.url}/ready")[0] == 503, 5, "draining")
    assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 503
    for thread in threads:
        thread.join(30)
    assert engine.wait(15) == 0
    for out in results:
        assert out["chunks"][-1] == "[DONE]"
        assert '"finish_reason": "length"' in out["chunks"][-2]


def test_api_key_guards_everything_but_probes_and_metrics(start_sim_engine: EngineFactory) -> None:
    engine = start_sim_engine(args=["--api-key", "sk-sim"])
    assert http_get(f"{engine.url}/v1/models")[0] == 401
    assert http_get(f"{engine.url}/v1/models", api_key="wrong")[0] == 401
    assert http_get(f"{engine.url}/v1/models", api_key="sk-sim")[0] == 200
    for open_path in ("/health", "/ready", "/metrics"):
        assert http_get(f"{engine.url}{open_path}")[0] == 200
    denied = httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT)
    assert denied.status_code == 401 and denied.json() == {"error": "Unauthorized"}


def test_injected_crash_after_n_requests_exits_the_process(start_sim_engine: EngineFactory) -> None:
    engine = start_sim_engine(args=["--sim-crash-after-requests", "2"])
    for _ in range(2):
        assert httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT).status_code == 200
    assert engine.wait(10) == 1


def test_injected_errors_answer_500(start_sim_engine: EngineFactory) -> None:
    engine = start_sim_engine(env={"PLINTH_SIM_ERROR_RATE": "1"})
    response = httpx.post(f"{engine.url}/v1/chat/completions", json=CHAT)
    assert response.status_code == 500 and response.json()["type"] == "InternalServerError"
    assert http_get(f"{engine.url}/health")[0] == 200


def test_an_injected_stall_pauses_a_stream_which_then_completes(
    start_sim_engine: EngineFactory,
) -> None:
    engine = start_sim_engine(args=["--sim-stall-after-tokens", "3", "--sim-stall-seconds", "1"])
    body = {**CHAT, "max_tokens": 6, "ignore_eos": True, "stream": True}
    arrivals = []
    with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                arrivals.append((time.monotonic(), line))
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
    assert arrivals[-1][1] == "data: [DONE]"
    assert max(gaps) >= 0.9  # a lower bound only: the stall happened


def test_a_malformed_flag_value_exits_2_like_sglang() -> None:
    result = run_sim("--model-path", "m", "--tp-size", "two")
    assert result.returncode == 2
    assert "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'" in result.stderr


def test_a_configuration_that_cannot_fit_exits_1() -> None:
    result = run_sim("--model-path", "m", "--mem-fraction-static", "0.05")
    assert result.returncode == 1 and "Not enough memory" in result.stderr


def test_quantized_revisions_keep_tokens_and_perturb_logprobs_slightly(
    start_sim_engine: EngineFactory,
) -> None:
    base, fp8 = start_sim_engine(), start_sim_engine(args=["--quantization", "fp8"])
    body = {**CHAT, "seed": 1, "logprobs": True, "top_logprobs": 5, "max_tokens": 8}

    def answer(engine: ManagedProcess) -> Any:
        return httpx.post(f"{engine.url}/v1/chat/completions", json=body).json()["choices"][0]

    a, b = answer(base), answer(fp8)
    assert a["message"]["content"] == b["message"]["content"]
    drift = [
        abs(x["logprob"] - y["logprob"])
        for x, y in zip(a["logprobs"]["content"], b["logprobs"]["content"], strict=True)
    ]
    assert 0 < max(drift) < 0.5


def test_speculative_decoding_reports_its_accept_length(start_sim_engine: EngineFactory) -> None:
    engine = start_sim_engine(
        args=["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
    )
    body = {"text": "Speculate", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
    meta = httpx.post(f"{engine.url}/generate", json=body).json()["meta_info"]
    assert meta["completion_tokens"] == 40
    assert 1 < meta["spec_accept_length"] <= 4 and meta["spec_verify_ct"] < 40
    metrics = httpx.get(f"{engine.url}/metrics").text
    assert "sglang:spec_accept_length{" in metrics
    loads = httpx.get(f"{engine.url}/v1/loads?include=spec").json()["loads"][0]
    assert 1 < loads["speculative"]["accept_length"] <= 4
    assert loads["max_running_requests"] == 48


def test_a_client_that_goes_away_mid_stream_aborts_its_request(
    start_sim_engine: EngineFactory,
) -> None:
    engine = start_sim_engine(time_scale=1.0)
    body = {**CHAT, "max_tokens": 1000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{engine.url}/v1/chat/completions", json=body) as response:
        next(response.iter_lines())

    def aborted() -> bool:
        return metric_sum(engine.url, "sglang:num_aborted_requests_total") == 1

    engine.wait_until(aborted, 10, "counting the abort")
    assert metric_sum(engine.url, "sglang:num_running_reqs") == 0
