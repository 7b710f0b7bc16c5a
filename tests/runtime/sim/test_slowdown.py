"""The injected slowdown (``--sim-slowdown`` / ``PLINTH_SIM_SLOWDOWN``): a degraded GPU, every
engine step that many times longer in simulated time, so TTFT and ITL grow by that factor (what
a canary's automatic abort is tested against)."""

from __future__ import annotations

import pytest

from runtime.sim.args import parse_engine_args
from tests.aio import run_async
from tests.runtime.sim.test_engine_loop import make_engine, prompt_of, serve, ttft


def test_a_slowed_engine_takes_that_many_times_longer_per_step() -> None:
    def timings(*flags: str) -> tuple[float, float]:
        [req] = run_async(serve(make_engine(*flags), [prompt_of(300)], max_new=8))
        assert req.first_token_at is not None and req.last_token_at is not None
        return ttft(req), req.last_token_at - req.first_token_at

    first, decode = timings()
    slow_first, slow_decode = timings("--sim-slowdown", "4")
    assert slow_first == pytest.approx(4 * first)
    assert slow_decode == pytest.approx(4 * decode)


def test_the_slowdown_comes_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLINTH_SIM_SLOWDOWN", "2.5")
    args = parse_engine_args(["--model-path", "meta-llama/Llama-3.1-8B-Instruct"])
    assert args.sim.slowdown == 2.5
    with pytest.raises(SystemExit):
        parse_engine_args(["--model-path", "m", "--sim-slowdown", "0"])
