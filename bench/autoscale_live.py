"""``bench/autoscale.py --mode live``: the ramp against a real endpoint on the local cluster.

Not a test. One throw-away database; a real Celery worker and beat with the probe and the
autoscaler every ``--interval`` seconds; the gateway (``python -m gateway``); the endpoint on the
local cluster (simulated SGLang engines and the smg router, as processes). For each policy the
bench creates an endpoint through the services, waits for it to serve, then sends the model
mode's ramp (base, up 4x, hold, down, base, near-idle) ``--compress`` times shorter, open loop
(Poisson arrivals, streamed chat completions through the gateway), and deletes the endpoint.
The policy's ``window_seconds`` and ``scale_down_delay_seconds`` are the model mode's divided by
``--compress`` too; the engines start in what the host takes to start a process (seconds).

Time: the engines run at time scale 1 (simulated time = real time), because the probe turns
counters into rates over real seconds and the SLO policy compares those with the performance
model's simulated capacity; at any other scale the two disagree by the scale. To keep the load a
two-core host can carry, the model is one the host can serve a few replicas of: Llama-3.1-70B
on 4 x A100-80GB per replica, 256-token prompts, 32-token answers (about 8 req/s per replica
within TTFT 500 ms / ITL 150 ms). TTFT and ITL are measured by the client in real time (send to
first content chunk; (last - first chunk) / (chunks - 1)), so they include the gateway, the
router and any lateness of a loaded host: a conservative reading of the engine's figures. The
ITL is each request's mean gap, not the per-token p90 the autoscaler targets. The simulated
engines are faster than the performance model at this shape (ITL p90 ~23 ms observed where the
model says 120-140 ms), so ``--engine-slowdown`` (the engines' ``--sim-slowdown``) makes every
step that many times longer, for a case where one replica does not carry the peak.

GPU-hours: the endpoint's ``desired_replicas`` (what the autoscaler asked for: starting or
serving) sampled every second, times 4 GPUs per replica, over the ramp; scaled by ``--compress``
to the uncompressed ramp's hours, so the figures read like the model mode's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autoscale import Phase, ramp, rate_at  # noqa: E402  (beside this script)
from control_plane import start, stop, stop_local_processes, wait  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PLINTH_ENV", "test")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
QUEUE = f"plinth-bench-as-{os.getpid()}"
os.environ["CELERY_QUEUE"] = QUEUE  # this process sends to the bench's worker only

MODEL, GPU, TP = "meta-llama/Llama-3.1-70B-Instruct", "A100-80GB", 4
INPUT_WORDS, OUTPUT_TOKENS = 240, 32  # about 256 prompt tokens with the chat template
ENGINE_ENV = {"PLINTH_SIM_DRAIN_TIMEOUT": "2"}  # a removed replica goes within seconds
# Reconcile and the probe keep up with a ramp compressed to minutes.
PLANE_ENV = {
    "PLINTH_RECONCILE_INTERVAL_S": "1", "PLINTH_SETTLED_RECONCILE_S": "2",
    "PLINTH_LOCAL_STOP_GRACE_S": "2", "PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S": "1",
}  # fmt: skip


@dataclass
class Result:
    """One request as the client saw it (seconds)."""

    ok: bool
    ttft: float = math.inf
    itl: float = 0.0
    chunks: int = 0


@dataclass
class LiveRun:
    name: str
    results: list[Result] = field(default_factory=list)
    replica_seconds: float = 0.0
    peak_replicas: int = 0
    scale_events: int = 0
    failed: int = 0

    def attainment(self, ttft: float, itl: float) -> float:
        good = sum(r.ok and r.ttft <= ttft and r.itl <= itl for r in self.results)
        return good / len(self.results) if self.results else 1.0


def compressed(phases: list[Phase], factor: float) -> list[Phase]:
    return [Phase(max(1, round(p.seconds / factor)), p.start_rps, p.end_rps) for p in phases]


def spec_for(autoscaling: dict[str, Any], slowdown: float = 1.0) -> dict[str, Any]:
    env = {**ENGINE_ENV, "PLINTH_SIM_SLOWDOWN": f"{slowdown:g}"} if slowdown != 1 else ENGINE_ENV
    return {
        "model": {"source": MODEL, "served_name": "chat"},
        "hardware": {"gpu": GPU},
        "parallelism": {"tp": TP},
        "runtime": {"env": env},
        "autoscaling": autoscaling,
    }


# ---- the client ---------------------------------------------------------------------------


async def one_request(session: Any, url: str, key: str, body: bytes) -> Result:
    sent = time.perf_counter()
    first = last = 0.0
    chunks = 0
    try:
        async with session.post(
            url, data=body, headers={"Authorization": f"Bearer {key}",
                                     "Content-Type": "application/json"},
        ) as response:  # fmt: skip
            if response.status != 200:
                await response.read()
                return Result(ok=False)
            async for line in response.content:
                if not line.startswith(b"data: {"):
                    continue
                delta = json.loads(line[6:])["choices"]
                if not delta or not delta[0].get("delta", {}).get("content"):
                    continue
                last = time.perf_counter()
                first = first or last
                chunks += 1
    except Exception:  # any failure is a missed request, counted as such
        return Result(ok=False)
    if not chunks:
        return Result(ok=False)
    itl = (last - first) / (chunks - 1) if chunks > 1 else 0.0
    return Result(ok=True, ttft=first - sent, itl=itl, chunks=chunks)


async def drive(phases: list[Phase], url: str, key: str, seed: int) -> list[Result]:
    """Open-loop Poisson arrivals at the ramp's rate; waits for the last answer."""
    import aiohttp

    rng = random.Random(seed)
    body = json.dumps({
        "model": "chat", "stream": True, "max_tokens": OUTPUT_TOKENS, "ignore_eos": True,
        "messages": [{"role": "user", "content": " ".join(["word"] * INPUT_WORDS)}],
    }).encode()  # fmt: skip
    total = sum(p.seconds for p in phases)
    tasks: list[asyncio.Task[Result]] = []
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        began = time.perf_counter()
        t = 0.0
        while True:
            rate = max(rate_at(phases, int(t)), 1e-3)
            t += rng.expovariate(rate)
            if t >= total:
                break
            delay = began + t - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one_request(session, url, key, body)))
        remaining = began + total - time.perf_counter()
        if remaining > 0:
            await asyncio.sleep(remaining)
        return list(await asyncio.gather(*tasks))


# ---- the control plane --------------------------------------------------------------------


def seed_org() -> tuple[Any, str]:
    from django.contrib.auth import get_user_model

    from controlplane import services as platform

    user = get_user_model().objects.create_user("bench", password="unused-bench-password")
    org = platform.create_organization(name="Bench", owner=user)
    actor = platform.actor_for_user(user, org.pk)
    key = platform.create_api_key(actor, name="load", kind="inference")
    return actor, key.plaintext


def serving(slug: str, replicas: int) -> bool:
    from deployments.endpoints.models import Deployment

    row = Deployment.objects.filter(slug=slug).first()
    return row is not None and row.status == "active" and row.ready_replicas >= replicas


def gone(slug: str) -> bool:
    from deployments.endpoints.models import Deployment

    return not Deployment.objects.filter(slug=slug).exists()


class Sampler(threading.Thread):
    """Every second: the endpoint's desired replicas (starting or serving)."""

    def __init__(self, slug: str, figures: LiveRun) -> None:
        super().__init__(daemon=True)
        self.slug, self.figures, self.halt = slug, figures, threading.Event()

    def run(self) -> None:
        from django.db import connection

        from deployments.endpoints.models import Deployment

        rows = Deployment.objects.filter(slug=self.slug).values_list("desired_replicas", flat=True)
        last, previous = time.perf_counter(), None
        try:
            while not self.halt.wait(1.0):
                now, replicas = time.perf_counter(), rows.get()
                self.figures.replica_seconds += replicas * (now - last)
                self.figures.peak_replicas = max(self.figures.peak_replicas, replicas)
                if previous is not None and replicas != previous:
                    self.figures.scale_events += 1
                previous, last = replicas, now
        finally:
            connection.close()


def run_policy(
    name: str, slug: str, autoscaling: dict[str, Any], ready: int, seeded: tuple[Any, str],
    gateway_url: str, phases: list[Phase], args: argparse.Namespace,
) -> LiveRun:  # fmt: skip
    from deployments.endpoints import services

    actor, key = seeded
    run = LiveRun(name)
    began = time.monotonic()
    services.create_deployment(
        actor, slug=slug, name=name, spec=spec_for(autoscaling, args.engine_slowdown)
    )
    wait(lambda: serving(slug, ready), f"{slug} serving {ready} replicas", 300, 1.0)
    print(f"  {name}: {ready} ready after {time.monotonic() - began:.0f} s", flush=True)
    sampler = Sampler(slug, run)
    url = f"{gateway_url}/endpoints/{slug}/v1/chat/completions"
    sampler.start()
    try:
        run.results = asyncio.run(drive(phases, url, key, args.seed))
    finally:
        sampler.halt.set()
        sampler.join()
    run.failed = sum(not r.ok for r in run.results)
    services.delete_deployment(actor, slug)
    wait(lambda: gone(slug), f"{slug} deleted", 120, 1.0)
    return run


def run_live(args: argparse.Namespace) -> None:
    import django

    django.setup()
    import redis
    from django.conf import settings
    from django.db import connection

    from runtime.capacity import Workload, replica_model
    from runtime.sim.launcher import free_port, http_get
    from runtime.spec import RuntimeSpec

    factor = args.compress
    phases = compressed(ramp(args.base_rps), factor)
    ttft, itl = args.ttft_ms / 1000, args.itl_ms / 1000
    model = replica_model(
        RuntimeSpec.model_validate(spec_for({})), "engine", Workload(256, OUTPUT_TOKENS)
    )
    assert model is not None
    capacity = model.capacity_rps(ttft, itl)
    maximum = math.ceil(4 * args.base_rps / (capacity * 0.8))
    target = max(1, round(model.running_at(capacity)))
    window = max(args.interval * 2, round(60 / factor))
    delay = max(window, round(300 / factor))
    common = {"min_replicas": 1, "max_replicas": maximum, "target_utilization": args.utilization,
              "window_seconds": window, "scale_down_delay_seconds": delay}  # fmt: skip
    policies = {
        "fixed": ("fixed max", {**common, "min_replicas": maximum}, maximum),
        "concurrency": (
            f"concurrency target {target}", {**common, "concurrency_target": target}, 1,
        ),
        "slo": ("SLO", {**common, "slo": {"ttft_p90_ms": args.ttft_ms, "itl_p90_ms": args.itl_ms}},
                1),
    }  # fmt: skip
    chosen = [p.strip() for p in args.policies.split(",") if p.strip()]

    settings.DATABASES["default"]["TEST"]["NAME"] = f"bench_plinth_as_{os.getpid()}"
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    workdir = Path(tempfile.mkdtemp(prefix="plinth-bench-as-"))
    db = settings.DATABASES["default"]
    env = {
        **os.environ, **PLANE_ENV,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db_name}",
        "CELERY_QUEUE": QUEUE, "PLINTH_LOCAL_RUN_DIR": str(workdir / "local"),
        "PLINTH_DATA_DIR": str(workdir), "PYTHONPATH": str(ROOT), "LOG_LEVEL": "WARNING",
        "PLINTH_PROBE_INTERVAL_S": str(args.interval),
        "PLINTH_AUTOSCALE_INTERVAL_S": str(args.interval),
    }  # fmt: skip
    celery = [str(Path(sys.executable).with_name("celery")), "-A", "controlplane"]
    procs = []
    runs: list[LiveRun] = []
    try:
        seeded = seed_org()
        procs.append(start(
            [*celery, "worker", "-l", "info", "--concurrency", "2", "-Q", QUEUE,
             "-n", f"{QUEUE}@%h", "--without-gossip", "--without-mingle"],
            env, workdir / "worker.log",
        ))  # fmt: skip
        procs.append(start([*celery, "beat", "-s", str(workdir / "beat-schedule")], env,
                           workdir / "beat.log"))  # fmt: skip
        port = free_port()
        procs.append(start(
            [sys.executable, "-m", "gateway", "--port", str(port),
             "--metrics-port", str(free_port())],
            env, workdir / "gateway.log",
        ))  # fmt: skip
        gateway_url = f"http://127.0.0.1:{port}"
        wait(lambda: http_get(f"{gateway_url}/health")[0] == 200, "gateway up", 60)
        for i, key in enumerate(chosen):
            name, autoscaling, ready = policies[key]
            print(f"policy {name}", flush=True)
            runs.append(run_policy(name, f"ramp-{i}-{key}", autoscaling, ready, seeded,
                                   gateway_url, phases, args))  # fmt: skip
    finally:
        for proc in reversed(procs):
            stop(proc)
        stop_local_processes(workdir / "local")
        connection.creation.destroy_test_db(db_name, verbosity=0)
        client = redis.Redis.from_url(settings.REDIS_URL)
        client.delete(*[QUEUE, *(f"{QUEUE}\x06\x16{s}" for s in (3, 6, 9))])
        if args.keep_logs:
            print(f"  logs: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    report(runs, phases, args, capacity=capacity, maximum=maximum, window=window, delay=delay)


def report(
    runs: list[LiveRun], phases: list[Phase], args: argparse.Namespace, *, capacity: float,
    maximum: int, window: int, delay: int,
) -> None:  # fmt: skip
    total = sum(p.seconds for p in phases)
    ttft, itl = args.ttft_ms / 1000, args.itl_ms / 1000
    print(
        f"\nLive, local cluster: Llama-3.1-70B on {TP} x {GPU} per replica (simulated engines, "
        f"time scale 1, engine slowdown {args.engine_slowdown:g}x), ~256/{OUTPUT_TOKENS} tokens, "
        f"through the gateway; SLO TTFT "
        f"{args.ttft_ms:g} ms, ITL {args.itl_ms:g} ms (client-measured, real time); ramp "
        f"{args.base_rps:g} -> {4 * args.base_rps:g} req/s over {total} s ({args.compress:g}x "
        f"compressed); model capacity {capacity:.1f} req/s/replica; max {maximum} replicas; "
        f"window {window} s, scale-down delay {delay} s, probe/autoscale every {args.interval} s"
    )
    fixed = next((r.replica_seconds for r in runs if r.name == "fixed max"), None)
    print(f"{'policy':<24} | {'SLO attainment':>14} | {'GPU-hours':>9} | {'share of fixed-max':>18}"
          f" | {'requests':>8} | {'failed':>6} | {'peak replicas':>13} | {'scale events':>12}"
          f" | {'TTFT p90 ms':>11} | {'ITL p90 ms':>10}")  # fmt: skip
    for run in runs:
        hours = run.replica_seconds * TP * args.compress / 3600
        share = f"{run.replica_seconds / fixed:.0%}" if fixed else "-"
        ok = [r for r in run.results if r.ok]
        p90t = _p90([r.ttft for r in ok]) * 1000
        p90i = _p90([r.itl for r in ok]) * 1000
        print(
            f"{run.name:<24} | {run.attainment(ttft, itl):>13.1%} | {hours:>9.2f} | "
            f"{share:>18} | {len(run.results):>8} | {run.failed:>6} | {run.peak_replicas:>13} | "
            f"{run.scale_events:>12} | {p90t:>11.0f} | {p90i:>10.0f}"
        )


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] if ordered else math.nan
