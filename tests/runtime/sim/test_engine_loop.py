"""The engine loop in-process: its own clock, chat prefixes across turns, and loop properties.

Engines here run on the fast clock (``--sim-clock fast``), so simulated time is exactly the sum of
step durations; nothing is asserted about real time.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.perf.hardware import resolve_gpu, resolve_model
from runtime.sim.args import parse_engine_args
from runtime.sim.clock import SimClock
from runtime.sim.engine import Engine
from runtime.sim.memory import plan_memory
from runtime.sim.request import GenerationParams, SimRequest
from runtime.sim.tokenizer import EOS_ID, Tokenizer
from tests.aio import run_async

T = TypeVar("T")
PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class FakeTime:
    """A real-time source the test moves by hand (a host that wakes late when told to)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return run_async(coro)


# ---- the clock -------------------------------------------------------------------------------
def test_late_wake_ups_do_not_change_simulated_time() -> None:
    """A step takes its simulated duration however late the host wakes the loop."""

    async def steps(lateness: float) -> float:
        real = FakeTime()
        clock = SimClock(time_scale=1.0, real=real, max_debt_s=10.0)
        clock.start_busy()
        for _ in range(10):
            real.t += 0.01 + lateness  # the step's duration, plus the host's lateness
            await clock.run_step(0.01)
        return clock.sim

    assert _run(steps(0.0)) == _run(steps(0.005)) == pytest.approx(10 * 0.01)


def test_debt_is_caught_up_then_bounded() -> None:
    async def scenario() -> tuple[float, float, float]:
        real = FakeTime()
        clock = SimClock(time_scale=1.0, real=real, max_debt_s=0.25)
        clock.start_busy()
        real.t += 0.1  # the host stalled 0.1 s: owed, caught up without re-anchoring
        await clock.run_step(0.01)
        owed = clock.debt()
        first = clock.reanchored_s
        real.t += 1.0  # a 1 s stall: beyond the bound, the clock re-anchors
        await clock.run_step(0.01)
        return owed, first, clock.reanchored_s

    owed, first, reanchored = _run(scenario())
    assert 0 < owed <= 0.25 and first == 0.0
    assert reanchored > 0


def test_idle_time_follows_real_time_at_the_time_scale() -> None:
    real = FakeTime()
    clock = SimClock(time_scale=10.0, mode="fast", real=real)
    clock.start_busy()
    _run(clock.run_step(5.0))  # fast: no real time passes
    clock.go_idle()
    assert clock.now() == 5.0
    real.t += 1.0
    assert clock.now() == 15.0


# ---- engines in-process ----------------------------------------------------------------------
def make_engine(*flags: str) -> Engine:
    args = parse_engine_args(["--model-path", "meta-llama/Llama-3.1-8B-Instruct", *flags])
    args = dataclasses.replace(args, sim=dataclasses.replace(args.sim, clock="fast"))
    gpu, model = resolve_gpu(args.sim.gpu), resolve_model(args.model_path, lambda _: None)
    engine = Engine(args, gpu, model, plan_memory(args, gpu, model))
    # These tests submit what they like when they like; none is a closed-loop client the arrival
    # barrier would wait for (test_a_returning_client_... tests the barrier itself).
    engine.arrival_wait_s = 0.0
    return engine


async def serve(engine: Engine, prompts: Sequence[list[int]], max_new: int = 4) -> list[SimRequest]:
    """Submit ``prompts`` one after another (each after the previous finished)."""
    loop_task = asyncio.create_task(engine.run())
    done = []
    try:
        for prompt in prompts:
            params = GenerationParams(max_new_tokens=max_new, ignore_eos=True)
            req = engine.new_request(prompt, params, stream=False)
            engine.submit(req)
            while (await req.updates.get()).finished is None:
                pass
            done.append(req)
    finally:
        loop_task.cancel()
    return done


def ttft(req: SimRequest) -> float:
    assert req.first_token_at is not None
    return req.first_token_at - req.arrival


def prompt_of(length: int, salt: int = 0) -> list[int]:
    return [1000 + (salt * 7919 + i) % 50000 for i in range(length)]


@PROPERTY
@given(short=st.integers(8, 4000), extra=st.integers(64, 4000))
def test_ttft_grows_with_prompt_length(short: int, extra: int) -> None:
    engine = make_engine("--disable-radix-cache")
    a, b = _run(serve(engine, [prompt_of(short), prompt_of(short + extra, salt=1)]))
    assert ttft(b) > ttft(a)


@PROPERTY
@given(length=st.integers(16, 6000), shared=st.floats(0.1, 1.0))
def test_a_cache_hit_never_raises_ttft(length: int, shared: float) -> None:
    cold_engine, warm_engine = make_engine(), make_engine()
    prompt = prompt_of(length)
    prefix = prompt[: max(1, int(length * shared))]
    (cold,) = _run(serve(cold_engine, [prompt]))
    _, warm = _run(serve(warm_engine, [[*prefix, 7], prompt]))
    assert (warm.cached_tokens or 0) > 0 or len(prefix) < 2
    assert ttft(warm) <= ttft(cold)


@PROPERTY
@given(
    lengths=st.lists(st.integers(100, 30000), min_size=1, max_size=12),
    max_new=st.integers(1, 300),
)
def test_kv_use_never_exceeds_the_pool_sized_from_the_gpu(lengths: list[int], max_new: int) -> None:
    engine = make_engine("--max-total-tokens", "40000")
    assert engine.plan.weight_gb + engine.plan.kv_cache_gb <= engine.gpu.memory_gib
    peak = 0

    async def run_all() -> None:
        nonlocal peak
        loop_task = asyncio.create_task(engine.run())
        reqs = []
        for i, n in enumerate(lengths):
            req = engine.new_request(
                prompt_of(n, i), GenerationParams(max_new_tokens=max_new), stream=False
            )
            engine.submit(req)
            reqs.append(req)
        while any(r.finished is None for r in reqs):
            peak = max(peak, engine.pool.used)
            assert engine.pool.used <= engine.pool.capacity
            await asyncio.sleep(0)
        loop_task.cancel()

    _run(run_all())
    kv_gib = peak * engine.plan.kv_cache_gb / engine.pool.capacity
    assert engine.plan.weight_gb + kv_gib <= engine.gpu.memory_gib


async def closed_loop(host_delay: float) -> tuple[float, float, float]:
    """A client sends a request, then its next one ``host_delay`` real seconds after the first
    finished, while a long request keeps the engine busy: (first's end, second's arrival and
    end), in simulated seconds from the first's arrival."""
    engine = make_engine()
    engine.arrival_wait_s = 5.0  # far above host_delay: the wait ends on the arrival itself
    loop_task = asyncio.create_task(engine.run())

    async def ask(salt: int, length: int, max_new: int) -> SimRequest:
        params = GenerationParams(max_new_tokens=max_new, ignore_eos=True)
        req = engine.new_request(prompt_of(length, salt), params, stream=False)
        engine.submit(req)
        return req

    try:
        await ask(9, 500, 400)  # in flight throughout
        first = await ask(1, 300, 8)
        while (await first.updates.get()).finished is None:
            pass
        await asyncio.sleep(host_delay)  # the host runs the client late
        second = await ask(2, 300, 8)
        while (await second.updates.get()).finished is None:
            pass
    finally:
        loop_task.cancel()
    assert first.last_token_at is not None and second.last_token_at is not None
    # From the first arrival: when the engine started is real-time driven (it was idle).
    start = first.arrival
    return first.last_token_at - start, second.arrival - start, second.last_token_at - start


def test_a_returning_client_lands_at_the_same_simulated_time_however_late_the_host() -> None:
    """Fast clock's arrival barrier: simulated time holds until the client is back."""
    on_time, late = _run(closed_loop(0.0)), _run(closed_loop(0.05))
    assert late[1] == late[0] and on_time[1] == on_time[0]
    assert late == pytest.approx(on_time, rel=1e-9)  # float rounding of the offset, nothing more


# ---- chat prefixes ---------------------------------------------------------------------------
@given(
    turns=st.lists(
        st.tuples(st.text(min_size=0, max_size=40), st.integers(1, 40)), min_size=1, max_size=4
    )
)
def test_turn_n_plus_1_starts_with_turn_n_prompt_and_answer(turns: list[tuple[str, int]]) -> None:
    """What real chat templates guarantee, and what the radix cache and router rely on."""
    tok = Tokenizer()
    messages: list[tuple[str, str]] = []
    for user, answer_len in turns:
        messages.append(("user", user))
        prompt = tok.encode_chat(messages)
        answer_ids = [tok.encode(" the")[0] + i % 50 for i in range(answer_len)] + [EOS_ID]
        messages.append(("assistant", tok.decode(answer_ids)))
        messages.append(("user", "next"))
        following = tok.encode_chat(messages)
        messages.pop()
        assert following[: len(prompt) + len(answer_ids)] == prompt + answer_ids


def test_second_chat_turn_caches_the_first_prompt_and_answer() -> None:
    tok = Tokenizer()
    engine = make_engine()
    first_prompt = tok.encode_chat([("system", "You are terse."), ("user", "Name a river.")])

    async def conversation() -> tuple[SimRequest, SimRequest]:
        (first,) = await serve(engine, [first_prompt], max_new=12)
        answer = first.text
        second_prompt = tok.encode_chat(
            [
                ("system", "You are terse."),
                ("user", "Name a river."),
                ("assistant", answer),
                ("user", "Another one?"),
            ]
        )
        (second,) = await serve(engine, [second_prompt], max_new=12)
        return first, second

    first, second = _run(conversation())
    assert second.cached_tokens == first.prompt_tokens + first.completion_tokens
