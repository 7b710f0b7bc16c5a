"""Autoscaling policies on a traffic ramp, side by side: fixed max replicas, the concurrency-target
policy and the SLO policy (not a test).

Traffic (simulated seconds): a base load, a ramp up to four times it, a hold, a ramp back down, the
base again, then near-idle. Each policy runs the same arrivals (same seed) and is judged on SLO
attainment (the share of requests whose TTFT and ITL are both within the targets) and GPU-hours
(replicas starting or serving, times GPUs per replica), the last column as a share of fixed max.

Two modes:

``--mode model`` (the default): a model-in-the-loop simulation in simulated time, one-second
ticks. The decisions are the real ``deployments.autoscaling.decide.decide`` every ``--interval``
seconds on samples built as the probe stores them (requests/s, in flight, queued prompt tokens, KV
usage, TTFT/ITL p90 of the interval). The plant is the performance model of ``runtime.capacity``
(the simulator's physics, via the optimizer's queueing model) made ``--slowdown`` times slower than
the model the SLO policy starts from (every time scaled; under 1, faster), so its online
correction has something to correct, up or down;
requests beyond what the ready replicas carry queue, and their wait adds to their TTFT. A new
replica serves ``--startup`` simulated seconds after the decision. The concurrency policy's
target is what one replica runs at its SLO capacity per the same (uncorrected) model, which is
what a person sizing it by hand from the optimizer would pick. The probe's sampling and
reconcile's delays are modelled, not run.

``--mode live``: the same ramp ``--compress`` times shorter against a real endpoint on the local
cluster: a throw-away database, a real Celery worker and beat (probe and autoscaler every
``--interval`` s), the gateway, simulated engines and the smg router as processes, streamed
requests from an open-loop client; see ``bench/autoscale_live.py`` for what is measured how.
It runs at time scale 1 (the probe's rates are per real second), so it uses a model a two-core
host can carry a few replicas of (Llama-3.1-70B on 4 x A100-80GB, short requests).

Run: ``python bench/autoscale.py`` (a few seconds; ``--slowdown``, ``--startup``, ``--base-rps``
and the targets vary the case); ``python bench/autoscale.py --mode live`` (about 12 minutes;
``--compress 60 --policies slo`` for a two-minute look).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from deployments.autoscaling.decide import decide
from deployments.autoscaling.types import Observations, Sample, State
from runtime.capacity import ReplicaModel, Workload, replica_model
from runtime.spec import AutoscalingSettings, RuntimeSpec

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
}
WORKLOAD = Workload(input_tokens=1024, output_tokens=256)
BATCH_MEMORY = 0.85  # per second: a time constant of about 7 s


@dataclass(frozen=True)
class Phase:
    seconds: int
    start_rps: float
    end_rps: float


def ramp(base: float) -> list[Phase]:
    """Base, up 4x, hold, down, base, near-idle (simulated seconds)."""
    peak = 4 * base
    return [
        Phase(600, base, base),
        Phase(300, base, peak),
        Phase(1200, peak, peak),
        Phase(300, peak, base),
        Phase(600, base, base),
        Phase(1200, 0.02 * base, 0.02 * base),
    ]


def rate_at(phases: list[Phase], t: int) -> float:
    for phase in phases:
        if t < phase.seconds:
            return phase.start_rps + (phase.end_rps - phase.start_rps) * t / phase.seconds
        t -= phase.seconds
    return 0.0


@dataclass
class Plant:
    """Replicas serving under the performance model with every time ``slowdown`` times longer
    (or shorter, under 1): at rate r its latencies are ``slowdown`` x the model's at
    r x ``slowdown``, and as many requests run as the model runs at that rate (Little's law)."""

    model: ReplicaModel
    slowdown: float
    max_rps: float = 0.0  # what one replica sustains at all (a stable queue), in the plant

    def __post_init__(self) -> None:
        self.max_rps = self.model.capacity_rps(None, None) / self.slowdown

    def latencies(self, per_replica_rps: float) -> tuple[float, float, float]:
        """(TTFT, ITL, running) at this per-replica rate."""
        s = self.slowdown
        predicted = self.model.predict(min(per_replica_rps, self.max_rps) * s)
        return predicted.ttft_s * s, predicted.itl_s * s, predicted.running

    def capacity_rps(self, ttft_s: float, itl_s: float) -> float:
        """The most req/s one plant replica carries within the targets (bisection)."""
        low, high = 0.0, self.max_rps
        for _ in range(40):
            mid = (low + high) / 2
            ttft, itl, _ = self.latencies(mid)
            low, high = (mid, high) if ttft <= ttft_s and itl <= itl_s else (low, mid)
        return low


@dataclass
class Run:
    name: str
    requests: int = 0
    attained: int = 0
    gpu_seconds: float = 0.0
    scale_events: int = 0
    peak_replicas: int = 0

    @property
    def attainment(self) -> float:
        return self.attained / self.requests if self.requests else 1.0


@dataclass
class Fleet:
    ready: int
    starting: list[int] = field(default_factory=list)  # when each starting replica is ready

    @property
    def total(self) -> int:
        return self.ready + len(self.starting)

    def tick(self, now: int) -> None:
        came = [t for t in self.starting if t <= now]
        self.ready += len(came)
        self.starting = [t for t in self.starting if t > now]

    def scale_to(self, replicas: int, now: int, startup: int) -> None:
        while self.total < replicas:
            self.starting.append(now + startup)
        while self.total > replicas:
            if self.starting:
                self.starting.pop()
            else:
                self.ready -= 1


def p90(values: list[tuple[float, int]]) -> float | None:
    """The 90th percentile of (value, count) pairs."""
    total = sum(count for _, count in values)
    if not total:
        return None
    seen = 0
    for value, count in sorted(values):
        seen += count
        if seen >= 0.9 * total:
            return value
    return values[-1][0]


def simulate(
    name: str,
    policy: AutoscalingSettings | None,
    fixed: int,
    plant: Plant,
    arrivals: list[int],
    args: argparse.Namespace,
    decide_with: Callable[..., object] = decide,
) -> Run:
    run = Run(name)
    model = plant.model
    ttft_target, itl_target = args.ttft_ms / 1000, args.itl_ms / 1000
    fleet = Fleet(ready=fixed if policy is None else max(1, policy.min_replicas))
    backlog = 0.0
    smooth = 0.0  # per-replica rate the running batch reflects (see below)
    samples: list[Sample] = []
    interval: list[tuple[float, float, float, int]] = []  # (ttft, itl, served, arrived) per tick
    last_scaled: datetime | None = None
    corrections: dict[str, float] = {}
    last_request: datetime | None = None
    for t, arrived in enumerate(arrivals):
        fleet.tick(t)
        n = fleet.ready
        carried = n * plant.max_rps
        served = min(backlog + arrived, carried)
        backlog = backlog + arrived - served
        per_replica = served / n if n else 0.0
        # A replica's batch holds the requests of the last few seconds (a 256-token answer
        # lasts about as long), so its latencies follow the rate smoothed over that time, not
        # one second's Poisson count.
        smooth = BATCH_MEMORY * smooth + (1 - BATCH_MEMORY) * per_replica
        ttft, itl, running = plant.latencies(smooth) if n else (math.inf, math.inf, 0.0)
        wait = backlog / carried if carried else math.inf
        ok = ttft + wait <= ttft_target and itl <= itl_target
        run.requests += arrived
        run.attained += arrived if ok else 0
        run.gpu_seconds += fleet.total * 1.0
        run.peak_replicas = max(run.peak_replicas, fleet.total)
        interval.append((ttft + wait, itl, served, arrived))
        if arrived:
            last_request = EPOCH + timedelta(seconds=t)
        if (t + 1) % args.interval or policy is None:
            continue
        now = EPOCH + timedelta(seconds=t + 1)
        kv = running * (WORKLOAD.input_tokens + WORKLOAD.output_tokens / 2) / model.kv_tokens
        samples.append(
            Sample(
                ts=now,
                in_flight=running * n + backlog,
                requests_per_s=sum(s for _, _, s, _ in interval) / len(interval),
                queued=backlog,
                queued_prefill_tokens=backlog * WORKLOAD.input_tokens,
                kv_usage=min(1.0, kv) if n else None,
                ttft_p90=p90([(x, a) for x, _, _, a in interval if math.isfinite(x)]),
                itl_p90=p90([(y, a) for _, y, _, a in interval if math.isfinite(y) and a]),
                ready=n,
            )
        )
        interval = []
        reach = now - timedelta(seconds=policy.window_seconds + policy.scale_down_delay_seconds)
        samples = [s for s in samples if s.ts > reach]
        observations = Observations(
            samples=samples, last_request_at=last_request, models={"engine": model},
            corrections={"engine": corrections},
        )  # fmt: skip
        state = State(replicas=fleet.total, last_scaled_at=last_scaled, first_ready_at=EPOCH)
        decision = decide(policy, observations, state, now)
        if decision.corrected is not None:  # the task keeps it as a ModelCorrected event
            corrections = dict(decision.corrected.after)
        if decision.changed:
            fleet.scale_to(decision.desired, t + 1, args.startup)
            last_scaled = now
            run.scale_events += 1
    return run


def poisson_arrivals(phases: list[Phase], seed: int) -> list[int]:
    rng = random.Random(seed)
    total = sum(p.seconds for p in phases)
    out = []
    for t in range(total):
        rate = rate_at(phases, t)
        # Normal approximation above 30/s, exact (Knuth) below.
        if rate > 30:
            out.append(max(0, round(rng.gauss(rate, math.sqrt(rate)))))
            continue
        limit, count, product = math.exp(-rate), 0, rng.random()
        while product > limit:
            count += 1
            product *= rng.random()
        out.append(count)
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--mode", choices=("model", "live"), default="model",
        help="model: model-in-the-loop, simulated time (seconds); live: a local-cluster endpoint",
    )  # fmt: skip
    parser.add_argument("--base-rps", type=float, default=None, help="base load; the peak is 4x")
    parser.add_argument("--ttft-ms", type=float, default=None)
    parser.add_argument("--itl-ms", type=float, default=None)
    parser.add_argument("--slowdown", type=float, default=1.2, help="plant vs model latencies")
    parser.add_argument("--startup", type=int, default=60, help="simulated s to a new replica")
    parser.add_argument("--interval", type=int, default=None, help="probe/autoscale period, s")
    parser.add_argument("--utilization", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--compress",
        type=float,
        default=20.0,
        help="live: the model ramp's phases and windows this many times shorter",
    )
    parser.add_argument(
        "--engine-slowdown",
        type=float,
        default=1.0,
        help="live: the engines' --sim-slowdown (every step that many times longer)",
    )
    parser.add_argument("--keep-logs", action="store_true", help="live: keep the run directory")
    parser.add_argument(
        "--policies",
        default="fixed,concurrency,slo",
        help="live: which policies to run, comma-separated",
    )
    args = parser.parse_args()
    live = args.mode == "live"
    defaults = {"base_rps": 5.0 if live else 20.0, "ttft_ms": 500.0,
                "itl_ms": 150.0 if live else 50.0, "interval": 3 if live else 15}  # fmt: skip
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def main() -> None:
    args = parse_args()
    if args.mode == "live":
        from autoscale_live import run_live  # beside this script

        run_live(args)
        return
    spec = RuntimeSpec.model_validate(SPEC)
    model = replica_model(spec, "engine", WORKLOAD)
    assert model is not None
    plant = Plant(model, args.slowdown)
    phases = ramp(args.base_rps)
    arrivals = poisson_arrivals(phases, args.seed)
    capacity = model.capacity_rps(args.ttft_ms / 1000, args.itl_ms / 1000)
    true_capacity = plant.capacity_rps(args.ttft_ms / 1000, args.itl_ms / 1000)
    # Fixed max: what the peak truly needs with 20% headroom (the baseline that meets the SLO).
    maximum = math.ceil(4 * args.base_rps / (true_capacity * 0.8))
    common = {
        "min_replicas": 1, "max_replicas": maximum, "target_utilization": args.utilization,
        "window_seconds": 60, "scale_down_delay_seconds": 300,
    }  # fmt: skip
    target = max(1, round(model.running_at(capacity)))
    runs = [
        simulate("fixed max", None, maximum, plant, arrivals, args),
        simulate(
            f"concurrency target {target}",
            AutoscalingSettings(**common, concurrency_target=target),
            maximum,
            plant,
            arrivals,
            args,
        ),
        simulate(
            "SLO",
            AutoscalingSettings.model_validate(
                {**common, "slo": {"ttft_p90_ms": args.ttft_ms, "itl_p90_ms": args.itl_ms}}
            ),
            maximum,
            plant,
            arrivals,
            args,
        ),
    ]
    total = sum(p.seconds for p in phases)
    print(
        f"Llama-3.1-8B on H100-SXM, {WORKLOAD.input_tokens}/{WORKLOAD.output_tokens} tokens; "
        f"SLO TTFT p90 {args.ttft_ms:g} ms, ITL p90 {args.itl_ms:g} ms; ramp {args.base_rps:g} -> "
        f"{4 * args.base_rps:g} req/s over {total / 60:.0f} simulated minutes; model capacity "
        f"{capacity:.1f} req/s/replica, plant {args.slowdown:g}x slower ({true_capacity:.1f} "
        f"req/s/replica within the SLO); startup {args.startup} s; max {maximum} replicas"
    )
    fixed = runs[0].gpu_seconds
    print(f"{'policy':<24} | {'SLO attainment':>14} | {'GPU-hours':>9} | {'share of fixed-max':>18}"
          f" | {'peak replicas':>13} | {'scale events':>12}")  # fmt: skip
    for run in runs:
        print(
            f"{run.name:<24} | {run.attainment:>13.1%} | {run.gpu_seconds / 3600:>9.2f} | "
            f"{run.gpu_seconds / fixed:>17.0%} | {run.peak_replicas:>13} | {run.scale_events:>12}"
        )


if __name__ == "__main__":
    main()
