"""Confirm the optimizer's top picks by a short simulated run, in fast (simulated) time.

The optimizer's figures are analytic (a queueing model over ``runtime.perf``). This module runs
each candidate through the simulator's own scheduler instead: the same continuous batching,
chunked prefill, radix prefix cache, KV pool and retraction that ``python -m runtime.sim`` runs,
with step times from the same roofline, but as a discrete-event loop with no HTTP, no asyncio
and no sleeping, so a run of 60-160 requests takes a fraction of a second of host time.

What is simulated: every engine replica the candidate's LaunchPlan starts (its argv parsed as the
simulator parses it, on the spec's GPU), a Poisson arrival stream at the optimizer's load, and
each answer exactly ``output_tokens`` long. Each prompt is the traffic's shared prefix, then its
conversation's history (the earlier turns, as long as the optimizer assumes; already in the
prefix cache of the conversation's replica when the run starts), then new tokens. Cache-aware
routing keeps a conversation on its replica; other policies send each request to the replica
with the fewest in flight. Under P/D the prefill replica computes the prompt and its first
token, the KV moves over the simulator's transfer link, and the decode replica emits the first
token when it admits the request, as the simulator's P/D engines do.

What it leaves out: the router's own latency and its exact tree matching (cache-aware routing is
modelled as sticky conversations), and think time between turns. The first tenth of the requests
are left out of the percentiles and the first quarter out of the throughput (the engines are
still filling up). Figures are simulated seconds: the same on any host.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from runtime.launch import RolePlan, plan
from runtime.optimize import (
    PD_RANKING_MARGIN,
    Candidate,
    Objective,
    OptimizeRequest,
    OptimizeResult,
    candidate_dict,
)
from runtime.optimize.types import resolve_model
from runtime.perf.hardware import ModelShape, model_shape, resolve_gpu
from runtime.perf.kv_transfer import TransferLink, transfer_link
from runtime.sim.args import EngineArgs, StartupError, check_engine_args, parse_engine_args
from runtime.sim.engine import scheduler_config
from runtime.sim.kvpool import KvPool
from runtime.sim.memory import plan_memory
from runtime.sim.radix import RadixCache
from runtime.sim.request import GenerationParams, SimRequest, Update
from runtime.sim.roofline import Roofline
from runtime.sim.sampling import TokenSource
from runtime.sim.scheduler import Scheduler, Step
from runtime.sim.tokenizer import Tokenizer, output_word_id

DEFAULT_TOP = 3
# Requests per run: at most enough for a p90 over ~140 answers; fewer (down to the minimum) when
# answers are long, since each generated token costs the host a few microseconds.
DEFAULT_REQUESTS = 160
MIN_REQUESTS = 60
TOKEN_BUDGET = 50_000  # output tokens (plus a twentieth of the prompt tokens) per run
WARMUP_SHARE = 0.1  # requests left out of the latency percentiles (they find empty caches)
RAMP_SHARE = 0.25  # requests left out of the throughput (the engines are still filling up)
MAX_STEPS = 200_000  # a safety bound: an overloaded pick still ends, marked as missing its SLOs
PROMPT_ID_BASE = 1000  # prompt token ids start above the special and header ids


class ConfirmError(ValueError):
    """The candidate's plan cannot run on the simulator (it would refuse to start)."""


@dataclass(frozen=True)
class Measured:
    """What the simulated run measured, in simulated seconds."""

    requests: int  # requests sent
    completed: int
    ttft_p90_s: float
    itl_p90_s: float
    e2e_p90_s: float
    tpot_mean_s: float  # mean over answers of (last token - first token) / (tokens - 1)
    output_tokens_per_s: float  # over the arrival window
    simulated_s: float  # simulated time from the first arrival to the last answer
    meets_slo: bool  # every request answered, and every target the request set is met


@dataclass(frozen=True)
class Confirmation:
    candidate: Candidate
    measured: Measured


class _Source(TokenSource):
    """A token stream without per-token hashing: confirm needs lengths and timings, not text."""

    def token_at(self, position: int, finishing: bool) -> int:
        return output_word_id(position)


class _Discard:
    """Where a request's stream updates go: nobody reads them in a confirm run."""

    def put_nowait(self, update: Update) -> None:
        pass


@dataclass(eq=False)
class _Replica:
    role: str  # "engine", "prefill" or "decode"
    scheduler: Scheduler
    roofline: Roofline
    link: TransferLink
    step: Step | None = None
    in_flight: int = 0


@dataclass
class _Run:
    """The event loop's state: a heap of (time, order, kind, payload)."""

    events: list[tuple[float, int, str, Any]] = field(default_factory=list)
    order: int = 0
    gaps: list[float] = field(default_factory=list)  # ITL observations, seconds per token
    # Requests themselves, not their id(): a finished prefill request may be freed and its id
    # reused. `warm` ones are left out of the percentiles; `finished` ones are accounted for.
    warm: set[SimRequest] = field(default_factory=set)
    finished: set[SimRequest] = field(default_factory=set)
    # Throughput is counted between the arrival of the first request after the ramp-up and the
    # last arrival: the rate the candidate keeps up with, not the fill or the drain.
    window_start: float = 0.0
    window_end: float = 0.0
    window_tokens: int = 0
    answers: list[SimRequest] = field(default_factory=list)  # the requests that stream answers

    def push(self, at: float, kind: str, payload: Any) -> None:
        self.order += 1
        heapq.heappush(self.events, (at, self.order, kind, payload))


def _replicas(role: RolePlan, gpu: str, model: ModelShape) -> list[_Replica]:
    args = _engine_args(role, gpu)
    gpu_shape = resolve_gpu(gpu)
    try:
        check_engine_args(args)
        memory = plan_memory(args, gpu_shape, model)
    except StartupError as exc:  # what the simulator would exit 1 for: it would not start
        raise ConfirmError(f"{role.role}: {exc}") from exc
    out = []
    for _ in range(role.replicas):
        roofline = Roofline(args, gpu_shape, model)
        cache = RadixCache(memory.page_size, disabled=args.disable_radix_cache)
        scheduler = Scheduler(
            scheduler_config(args, memory, roofline.engine.spec),
            KvPool(memory.max_total_num_tokens, cache),
            Tokenizer(max(model.vocab_size, 1024)),
        )
        link = transfer_link(gpu_shape, args.disaggregation_transfer_backend)
        out.append(_Replica(role.role, scheduler, roofline, link))
    return out


def _engine_args(role: RolePlan, gpu: str) -> EngineArgs:
    # The argv the driver would start, read by the simulator's own parser, on the spec's GPU.
    return parse_engine_args(role.args, env={"PLINTH_SIM_GPU": gpu}, warn=lambda _: None)


@dataclass(frozen=True)
class _Prompt:
    ids: list[int]
    conversation: int
    history: int  # tokens of shared prefix plus this conversation's earlier turns


def _prompts(
    request: OptimizeRequest, count: int, rate_rps: float, turn_s: float | None = None
) -> list[_Prompt]:
    """Prompts of `count` requests: the shared prefix, then the conversation's history (its
    earlier turns, as long as the optimizer assumes), then new tokens.

    Conversations take turns round a pool as large as the conversations in progress at once
    when each sends its next turn as soon as it has its answer (Little's law over `turn_s`, a
    turn's predicted time, as the optimizer counts them; at the targets when not given): the
    prefix caches then hold as many histories as the steady state does, however long the run
    is.
    """
    traffic = request.traffic
    length = max(1, traffic.input_tokens)
    shared = min(length - 1, round(length * traffic.prefix_share))
    history = round((length - shared) * (traffic.turns - 1) / traffic.turns)
    history = min(history, length - shared - 1) if length - shared > 1 else 0
    # Token ids only need to differ where prompts differ: a counter is enough (and cheap).
    fresh = itertools.count(PROMPT_ID_BASE)
    prefix = list(itertools.islice(fresh, shared))
    slo = request.slo
    if turn_s is None or not math.isfinite(turn_s) or turn_s <= 0:
        turn_s = slo.ttft_p90_s + traffic.output_tokens * slo.itl_p90_s
    in_progress = rate_rps * turn_s
    conversations = max(1, min(count, math.ceil(in_progress)))
    histories = [list(itertools.islice(fresh, history)) for _ in range(conversations)]
    out = []
    for i in range(count):
        c = i % conversations
        ids = prefix + histories[c] + list(itertools.islice(fresh, length - shared - history))
        out.append(_Prompt(ids, c, shared + history))
    return out


def _prewarm(front: Sequence[_Replica], prompts: Sequence[_Prompt]) -> None:
    """Earlier turns ran before the measured window: each conversation's history is in its
    home replica's prefix cache, as the optimizer's steady state assumes."""
    warmed: set[int] = set()
    for prompt in prompts:
        if prompt.history and prompt.conversation not in warmed:
            warmed.add(prompt.conversation)
            pool = front[prompt.conversation % len(front)].scheduler.pool
            pool.cache.insert(prompt.ids[: prompt.history])
            if pool.free < 0:
                pool.cache.evict(-pool.free)


def _new_request(ids: list[int], max_new: int, at: float, rid: int) -> SimRequest:
    params = GenerationParams(max_new_tokens=max_new, ignore_eos=True)
    updates = cast("asyncio.Queue[Update]", _Discard())
    source = _Source(rid, 1, 0.0)
    return SimRequest(str(rid), ids, params, source, arrival=at, updates=updates)


def _least_loaded(replicas: Sequence[_Replica]) -> _Replica:
    return min(replicas, key=lambda r: r.in_flight)


def _route(front: Sequence[_Replica], prompt: _Prompt, cache_aware: bool) -> _Replica:
    """Cache-aware routing keeps a conversation on the replica holding its history; other
    policies balance load and find the history only where they happen to land."""
    if cache_aware and prompt.history:
        return front[prompt.conversation % len(front)]
    return _least_loaded(front)


def _start(replica: _Replica, now: float, run: _Run) -> None:
    """If idle with work, plan the next step and schedule its end (as ``Engine.run`` does)."""
    sched = replica.scheduler
    while replica.step is None and sched.has_work():
        if sched.transferred:
            sched.admit_transferred(now)
            if not sched.has_work():
                return
        step = sched.plan()
        if step.work.empty:
            sched.unstick()
            continue
        replica.step = step
        run.push(now + replica.roofline.step_seconds(step.work), "step", replica)


def _step_end(replica: _Replica, now: float, run: _Run) -> None:
    step = replica.step
    assert step is not None
    replica.step = None
    previous = [(req, tokens, req.last_token_at) for req, tokens in step.decode]
    replica.scheduler.commit(step, now)
    if replica.role != "prefill" and run.window_start <= now <= run.window_end:
        first = sum(1 for req, _ in step.prefill if req.first_token_at == now)
        run.window_tokens += first + sum(tokens for _, tokens in step.decode)
    for req, tokens, last in previous:
        if last is not None and req not in run.warm:
            run.gaps.append((now - last) / tokens)
    for req, _ in [*step.prefill, *step.decode]:
        if req.finished is not None and req not in run.finished:
            run.finished.add(req)
            replica.in_flight -= 1
            if replica.role == "prefill" and req.finished.kind != "abort":
                kv_bytes = len(req.input_ids) * replica.roofline.kv_bytes_per_token
                run.push(now + replica.link.seconds(kv_bytes), "transfer", req)
    _start(replica, now, run)


def _transfer_done(prefilled: SimRequest, now: float, run: _Run, cluster: _Cluster) -> None:
    """P/D: the prompt's KV reached a decode replica; the answer is streamed from there."""
    rid = len(run.answers)
    req = _new_request(prefilled.input_ids, cluster.output_tokens, prefilled.arrival, rid)
    req.cached_tokens = prefilled.cached_tokens
    if prefilled in run.warm:
        run.warm.add(req)
    run.answers.append(req)
    replica = _least_loaded(cluster.decoders)
    replica.in_flight += 1
    replica.scheduler.add_transferred(req)
    _start(replica, now, run)


@dataclass(frozen=True)
class _Cluster:
    """The candidate's engines: where requests arrive, and (P/D) where they decode."""

    front: list[_Replica]
    decoders: list[_Replica]
    cache_aware: bool
    output_tokens: int


def _cluster(request: OptimizeRequest, candidate: Candidate) -> _Cluster:
    spec = candidate.spec
    model = model_shape(resolve_model(request), request.model)
    roles = [r for r in plan(spec).roles if r.role != "router"]
    pools = {role.role: _replicas(role, spec.hardware.gpu, model) for role in roles}
    return _Cluster(
        front=pools.get("prefill") or pools["engine"],
        decoders=pools.get("decode", []),
        cache_aware=spec.routing.policy == "cache_aware",
        output_tokens=request.traffic.output_tokens,
    )


def default_requests(request: OptimizeRequest) -> int:
    traffic = request.traffic
    per_request = traffic.output_tokens + traffic.input_tokens / 20
    return max(MIN_REQUESTS, min(DEFAULT_REQUESTS, math.ceil(TOKEN_BUDGET / per_request)))


def confirm(
    request: OptimizeRequest,
    candidate: Candidate,
    rate_rps: float,
    *,
    requests: int | None = None,
    seed: int = 0,
) -> Measured:
    """Run `candidate` for `requests` Poisson arrivals at `rate_rps`; measure it."""
    requests = requests or default_requests(request)
    cluster = _cluster(request, candidate)
    p = candidate.prediction
    turn_s = p.ttft_p90_s + request.traffic.output_tokens * p.tpot_mean_s if p.tpot_mean_s else None
    prompts = _prompts(request, requests, rate_rps, turn_s)
    _prewarm(cluster.front, prompts)
    run = _Run()
    rng = random.Random(seed)
    arrival = 0.0
    for i, prompt in enumerate(prompts):
        run.push(arrival, "arrive", (i, prompt))
        if i == int(requests * RAMP_SHARE):
            run.window_start = arrival
        run.window_end = arrival
        arrival += rng.expovariate(rate_rps)
    end = _drive(run, cluster, warmup=requests * WARMUP_SHARE)
    return _measure(request, run, requests, end)


def _drive(run: _Run, cluster: _Cluster, warmup: float) -> float:
    """Process events in time order until none is left; the simulated time of the last."""
    steps = 0
    now = 0.0
    while run.events and steps < MAX_STEPS:
        now, _, kind, payload = heapq.heappop(run.events)
        if kind == "arrive":
            index, prompt = payload
            # A prefill replica stops at the first token, which the decode side streams.
            max_new = 1 if cluster.decoders else cluster.output_tokens
            req = _new_request(prompt.ids, max_new, now, index)
            if index < warmup:
                run.warm.add(req)
            if not cluster.decoders:
                run.answers.append(req)
            replica = _route(cluster.front, prompt, cluster.cache_aware)
            replica.in_flight += 1
            replica.scheduler.add(req)
            _start(replica, now, run)
        elif kind == "step":
            steps += 1
            _step_end(payload, now, run)
        else:
            _transfer_done(payload, now, run, cluster)
    return now


def _measure(request: OptimizeRequest, run: _Run, sent: int, end: float) -> Measured:
    done = [r for r in run.answers if r.finished is not None and r.finished.kind != "abort"]
    timed = [
        (r.first_token_at - r.arrival, r.last_token_at - r.arrival, len(r.output_ids))
        for r in done
        if r.first_token_at is not None and r.last_token_at is not None and r not in run.warm
    ]
    ttft, itl = _p90([t for t, _, _ in timed]), _p90(run.gaps)
    e2e = _p90([e for _, e, _ in timed])
    per_token = [(e - t) / (n - 1) for t, e, n in timed if n > 1]
    tpot = sum(per_token) / len(per_token) if per_token else math.inf
    span = run.window_end - run.window_start
    slo = request.slo
    meets = len(done) == sent and ttft <= slo.ttft_p90_s and itl <= slo.itl_p90_s
    if slo.e2e_p90_s is not None:
        meets = meets and e2e <= slo.e2e_p90_s
    if slo.tpot_mean_s is not None:
        meets = meets and tpot <= slo.tpot_mean_s
    return Measured(
        requests=sent,
        completed=len(done),
        ttft_p90_s=ttft,
        itl_p90_s=itl,
        e2e_p90_s=e2e,
        tpot_mean_s=tpot,
        output_tokens_per_s=run.window_tokens / span if span > 0 else 0.0,
        simulated_s=end,
        meets_slo=meets,
    )


def _p90(values: list[float]) -> float:
    if not values:
        return math.inf
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def confirm_top(
    request: OptimizeRequest,
    result: OptimizeResult,
    top: int = DEFAULT_TOP,
    *,
    requests: int | None = None,
) -> tuple[Confirmation, ...]:
    """The first `top` ranked candidates, each run at the load it is predicted at (the
    traffic's rate; under the `throughput` objective, the candidate's own capacity, the load
    its tokens/s per GPU are ranked at)."""
    return tuple(
        Confirmation(c, confirm(request, c, c.prediction.rate_rps, requests=requests))
        for c in result.ranked[:top]
    )


def measured_dict(measured: Measured) -> dict[str, Any]:
    def finite(value: float, digits: int) -> float | None:
        return round(value, digits) if math.isfinite(value) else None

    return {
        "requests": measured.requests,
        "completed": measured.completed,
        "ttft_p90_s": finite(measured.ttft_p90_s, 4),
        "itl_p90_s": finite(measured.itl_p90_s, 5),
        "e2e_p90_s": finite(measured.e2e_p90_s, 3),
        "tpot_mean_s": finite(measured.tpot_mean_s, 5),
        "output_tokens_per_s": round(measured.output_tokens_per_s, 1),
        "simulated_s": round(measured.simulated_s, 2),
        "meets_slo": measured.meets_slo,
    }


def measured_order(objective: Objective) -> Callable[[Confirmation], tuple[Any, ...]]:
    """The sort key ranking confirmed candidates by what their runs measured.

    Those that met the SLOs when run come first, then those without a validation warning of
    their own; then the objective (the cost, or under ``throughput`` the tokens/s per GPU at
    capacity, a P/D layout giving up its margin as in the analytic ranking: a short run at
    that load is still filling its engines, so its own tokens/s are no capacity figure, but
    its verdict is the one at that load); then the faster run (end-to-end p90, then TTFT
    p90): at equal cost the one the simulator shows faster ranks first.
    """

    def key(item: Confirmation) -> tuple[Any, ...]:
        c, m = item.candidate, item.measured
        if objective == "throughput":
            margin = PD_RANKING_MARGIN if c.spec.disaggregation.enabled else 0.0
            primary = -c.prediction.tokens_per_s_per_gpu * (1 - margin)
        else:
            primary = c.prediction.cost_per_hour
        return (not m.meets_slo, bool(c.warnings), primary, m.e2e_p90_s, m.ttft_p90_s)

    return key


def confirmed_pick(
    confirmations: Sequence[Confirmation], objective: Objective = "cost"
) -> Confirmation | None:
    """The confirmed candidate the simulated runs rank first (``measured_order``), if it met
    the SLOs when run and carries no warning of its own; None otherwise."""
    ordered = sorted(confirmations, key=measured_order(objective))
    first = ordered[0] if ordered else None
    if first is None or not first.measured.meets_slo or first.candidate.warnings:
        return None
    return first


def attach_measurements(
    data: dict[str, Any], confirmations: Sequence[Confirmation], objective: Objective = "cost"
) -> None:
    """Put each confirmation's figures under `measured` of its ranked entry, given `data` from
    ``result_dict`` and `confirm_top`'s answer, re-rank by them and make `best` the pick.

    The ranking follows the simulated runs, not the analytic figures: the confirmed candidates
    that met the SLOs come first in ``measured_order``, then the unconfirmed ones in the
    analytic order, then those whose runs missed the SLOs. `best` becomes the first of them
    (when it met the SLOs and carries no warning of its own), and its reasons say which
    candidates the analytic ranking put above it and why they rank lower now. When none met
    them, `best` stays the analytic pick and a note says it is unconfirmed.
    """
    entries = list(data["ranked"])
    for index, entry in enumerate(entries):
        entry["measured"] = (
            measured_dict(confirmations[index].measured) if index < len(confirmations) else None
        )
    ordered = sorted(range(len(confirmations)), key=lambda i: measured_order(objective)(
        confirmations[i]))  # fmt: skip
    met = [i for i in ordered if confirmations[i].measured.meets_slo]
    missed = [i for i in ordered if not confirmations[i].measured.meets_slo]
    rest = list(range(len(confirmations), len(entries)))
    data["ranked"] = [entries[i] for i in (*met, *rest, *missed)]
    if data.get("best") is None or not confirmations:
        return
    pick = confirmed_pick(confirmations, objective)
    if pick is None:
        data["best"]["measured"] = measured_dict(confirmations[0].measured)
        data.setdefault("notes", []).append(
            f"none of the {len(confirmations)} confirmed candidates met the SLOs in its "
            "simulated run (without a warning of its own); the best is the analytic pick, "
            "unconfirmed"
        )
        return
    best = candidate_dict(pick.candidate)
    best["measured"] = measured_dict(pick.measured)
    best["reasons"].extend(pick_reasons(pick, confirmations, objective))
    data["best"] = best
    data["ranked"][0] = best


def pick_reasons(
    pick: Confirmation, confirmations: Sequence[Confirmation], objective: Objective
) -> list[str]:
    """Why the simulated runs made `pick` the recommendation, naming each candidate the
    analytic ranking had put above it."""
    m = pick.measured
    order = "the cheapest" if objective == "cost" else "the most tokens/s per GPU"
    out = [
        f"confirmed: met the SLOs in a simulated run (TTFT p90 {m.ttft_p90_s * 1000:.0f} ms, "
        f"ITL p90 {m.itl_p90_s * 1000:.1f} ms, e2e p90 {m.e2e_p90_s:.2f} s); ranked by the "
        f"{len(confirmations)} simulated runs' figures: {order} that met the SLOs, the fastest "
        "end to end at equal cost"
    ]
    for other in confirmations[: confirmations.index(pick)]:
        o = other.measured
        if not o.meets_slo:
            why = (
                f"missed the SLOs when run (TTFT p90 {o.ttft_p90_s * 1000:.0f} ms, ITL p90 "
                f"{o.itl_p90_s * 1000:.1f} ms)"
            )
        elif other.candidate.warnings:
            why = "carries a validation warning of its own"
        else:
            why = f"ran slower (e2e p90 {o.e2e_p90_s:.2f} s against {m.e2e_p90_s:.2f} s)"
        out.append(f"{other.candidate.label} ranked higher by prediction but {why}")
    return out
