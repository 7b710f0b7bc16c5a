"""Fair sharing under overload: one key floods an endpoint at 5x its capacity beside a normal key.

Not a test. One run starts simulated engines (each running at most ``--per-replica`` requests at
once, queueing the rest first come, first served) behind the real smg router, and Plinth's
gateway (``python -m gateway``) on a throw-away database, four ways side by side:

- ``fair``: the gateway with fair admission (``gateway.admission``, the default): the endpoint's
  limit is replicas x its ``autoscaling.concurrency_target`` (``--target``, below the engines'
  ``--per-replica`` running requests, as a target usually is), waiting requests are admitted
  fairly across keys and the overflow is refused with 429;
- ``plain``: the same gateway with ``GATEWAY_FAIR_ADMISSION=off``: everything goes to the engines;
- ``smg``: ``plain`` in front of a second smg router over the same engines with smg's own
  admission (``--max-concurrent-requests`` = the same limit, ``--queue-size``,
  ``--queue-timeout-secs``), which knows no keys;
- ``control``: ``fair`` with a flood whose key no organization has, refused 401 by the gateway
  before any queue or engine: what the flood's client and the gateway's refusals cost the normal
  key on this machine's shared cores, with nothing shared on the engines.

Per setup, first the normal key alone (its unloaded TTFT), then the same normal traffic while
the flood key sends open-loop at ``--flood-factor`` x the endpoint's capacity (capacity: the
requests per second the engines complete at the limit, measured first by closed-loop clients).
Printed per setup: the normal key's TTFT p50/p90 unloaded and under the flood, its lost
requests (anything but 200), and the flood's answers: served, 429, other errors, timeouts
(no answer within ``--client-timeout``). Streamed completions; TTFT is the first token event.

Run: ``python bench/fairness.py`` (about four minutes; PostgreSQL and Redis from DATABASE_URL /
REDIS_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PLINTH_ENV", "test")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Reconcile tasks queued by creating endpoints go nowhere: the bench stands in for reconcile.
os.environ["CELERY_QUEUE"] = "bench-fairness-unconsumed"

from runtime.sim.launcher import SimCluster, free_port, http_get, start_router  # noqa: E402

MODEL = "sim/llama-test"
# About 1,000 prompt tokens: a TTFT long enough to read against this machine's noise.
PROMPT = "Summarise the quarterly report of the northern region in one line. " * 80


@dataclass
class Traffic:
    """What one key's requests got in one phase."""

    ttft: list[float] = field(default_factory=list)  # seconds, answered requests
    served: int = 0
    refused: int = 0  # 429
    errors: int = 0  # any other status, or a broken connection
    timeouts: int = 0  # no answer within the client's timeout

    @property
    def lost(self) -> int:
        return self.refused + self.errors + self.timeouts

    def pct(self, q: float) -> float:
        ordered = sorted(self.ttft)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


@dataclass
class Setup:
    name: str
    base_url: str  # ends in /v1
    # Whose key the flood sends: "flood"; "unknown" (a key no organization has) for the control,
    # whose flood the gateway refuses with 401 before any queue or engine: the same client and
    # gateway work on the same 2 cores, none of the engines'.
    flood_key: str = "flood"
    unloaded: Traffic = field(default_factory=Traffic)
    normal: Traffic = field(default_factory=Traffic)
    flood: Traffic = field(default_factory=Traffic)


# ---- processes and data -------------------------------------------------------------------


def create_database(args: argparse.Namespace) -> tuple[str, dict[str, str]]:
    """A fresh migrated database with the endpoints ``fair``, ``plain`` and ``smg`` and the keys
    ``normal`` and ``flood`` (both standard, weight 1). Returns (name, plaintext by key)."""
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection

    from controlplane import services as platform
    from deployments.endpoints import services as deployment_services

    settings.DATABASES["default"]["TEST"]["NAME"] = "bench_plinth_fairness"
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    user = get_user_model().objects.create_user("bench", password="unused-bench-password")
    org = platform.create_organization(name="Bench", owner=user)
    actor = platform.actor_for_user(user, org.pk)
    spec = {
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
        "hardware": {"gpu": "H100-SXM"},
        "batching": {"max_running_requests": args.per_replica},
        "autoscaling": {"concurrency_target": args.target},
        "routing": {"policy": "round_robin"},
    }
    for slug in ("fair", "plain", "smg"):
        deployment_services.create_deployment(actor, slug=slug, name=slug, spec=spec)
    keys = {
        who: platform.create_api_key(actor, name=who, kind="inference").plaintext
        for who in ("normal", "flood")
    }
    return name, keys


def mark_serving(slug: str, router_url: str, replicas: int) -> None:
    """Record what reconcile would observe once replicas are ready (no driver in the bench)."""
    from django.utils import timezone

    from deployments.endpoints.models import Deployment

    deployment = Deployment.objects.get(slug=slug)
    Deployment.objects.filter(pk=deployment.pk).update(
        applied_revision=deployment.target_revision,
        current_revision=deployment.target_revision,
        ready_replicas=replicas,
        total_replicas=replicas,
        router_url=router_url,
        first_ready_at=timezone.now(),
    )


def drop_database(name: str) -> None:
    from django.db import connection

    connection.creation.destroy_test_db(name, verbosity=0)


def start_gateway(db_name: str, log_dir: Path, **env: str) -> tuple[subprocess.Popen[bytes], str]:
    from django.conf import settings

    db = settings.DATABASES["default"]
    full_env = dict(os.environ, LOG_LEVEL="WARNING", PYTHONPATH=str(ROOT), **env)
    full_env["DATABASE_URL"] = (
        f"postgres://{db.get('USER') or 'postgres'}@{db.get('HOST') or '127.0.0.1'}:"
        f"{db.get('PORT') or 5432}/{db_name}"
    )
    port = free_port()
    argv = [sys.executable, "-m", "gateway", "--port", str(port)]
    argv += ["--metrics-port", str(free_port())]
    suffix = "fair" if env.get("GATEWAY_FAIR_ADMISSION") != "off" else "plain"
    with (log_dir / f"gateway-{suffix}.log").open("wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while http_get(f"http://127.0.0.1:{port}/health")[0] != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the gateway did not start; see {log_dir}")
        time.sleep(0.2)
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


# ---- load ---------------------------------------------------------------------------------


async def one_request(
    session: aiohttp.ClientSession, url: str, key: str, traffic: Traffic, args: argparse.Namespace
) -> None:
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "max_tokens": args.max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    started = time.perf_counter()
    try:
        async with asyncio.timeout(args.client_timeout):
            async with session.post(
                f"{url}/completions", json=body, headers={"Authorization": f"Bearer {key}"}
            ) as response:
                if response.status != 200:
                    await response.read()
                    if response.status == 429:
                        traffic.refused += 1
                    else:
                        traffic.errors += 1
                    return
                first = None
                async for line in response.content:
                    if first is None and line.startswith(b"data: {"):
                        first = time.perf_counter() - started
                if first is not None:
                    traffic.ttft.append(first)
                traffic.served += 1
    except TimeoutError:
        traffic.timeouts += 1
    except aiohttp.ClientError:
        traffic.errors += 1


async def open_loop(
    session: aiohttp.ClientSession,
    url: str,
    key: str,
    rate: float,
    traffic: Traffic,
    args: argparse.Namespace,
) -> None:
    """Poisson arrivals at ``rate`` per second for ``args.seconds``; waits for every answer."""
    tasks = []
    deadline = time.perf_counter() + args.seconds
    while time.perf_counter() < deadline:
        tasks.append(asyncio.create_task(one_request(session, url, key, traffic, args)))
        await asyncio.sleep(random.expovariate(rate))
    await asyncio.gather(*tasks)


async def capacity(
    session: aiohttp.ClientSession, url: str, key: str, limit: int, args: argparse.Namespace
) -> float:
    """Requests per second the engines complete with ``limit`` in flight (closed loop)."""
    traffic = Traffic()
    deadline = time.perf_counter() + args.seconds / 2

    async def client() -> None:
        while time.perf_counter() < deadline:
            await one_request(session, url, key, traffic, args)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(limit)))
    return traffic.served / (time.perf_counter() - started)


async def measure(setups: list[Setup], keys: dict[str, str], args: argparse.Namespace) -> float:
    limit = args.target * args.replicas
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        rate = await capacity(session, setups[0].base_url, keys["normal"], limit, args)
        print(f"capacity: {rate:.1f} requests/s at {limit} in flight", flush=True)
        for setup in setups:
            await open_loop(
                session, setup.base_url, keys["normal"], args.normal_rps, setup.unloaded, args
            )
            await asyncio.gather(
                open_loop(
                    session, setup.base_url, keys["normal"], args.normal_rps, setup.normal, args
                ),
                open_loop(
                    session,
                    setup.base_url,
                    keys[setup.flood_key],
                    rate * args.flood_factor,
                    setup.flood,
                    args,
                ),
            )
            print(f"  {setup.name} done", flush=True)
    return rate


# ---- report -------------------------------------------------------------------------------


def print_table(setups: list[Setup]) -> None:
    header = (
        f"{'setup':<7}{'p50 alone':>10}{'p50 flood':>10}{'p90 alone':>11}{'p90 flood':>11}"
        f"{'p90 +%':>10}"
        f"{'normal lost':>13}{'flood ok':>10}{'flood 429':>11}{'flood err':>11}"
        f"{'flood timeout':>15}"
    )
    print(header)
    print("-" * len(header))
    for s in setups:
        alone, flooded = s.unloaded.pct(0.9), s.normal.pct(0.9)
        change = (flooded / alone - 1) * 100 if alone else float("nan")
        print(
            f"{s.name:<7}{s.unloaded.pct(0.5):10.1f}{s.normal.pct(0.5):10.1f}"
            f"{alone:11.1f}{flooded:11.1f}{change:10.1f}"
            f"{s.normal.lost:>7}/{s.normal.served + s.normal.lost:<5}{s.flood.served:>10}"
            f"{s.flood.refused:>11}{s.flood.errors:>11}{s.flood.timeouts:>15}"
        )
    print(
        "TTFT in ms, of the normal key alone and beside the flood. normal lost: its requests"
        " not answered 200, of all it sent beside the flood."
    )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=2, help="simulated engines")
    parser.add_argument("--per-replica", type=int, default=8, help="max running requests each")
    parser.add_argument("--target", type=int, default=6, help="concurrency target per replica")
    parser.add_argument("--seconds", type=float, default=20.0, help="sending time per phase")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--normal-rps", type=float, default=2.0)
    parser.add_argument("--flood-factor", type=float, default=5.0)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--client-timeout", type=float, default=60.0)
    parser.add_argument("--smg-queue-size", type=int, default=64)
    parser.add_argument("--smg-queue-timeout", type=int, default=30)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="plinth-bench-fairness-"))
    db_name, keys = create_database(args)
    fair = plain = None
    limit = args.target * args.replicas
    engine_args = ["--max-running-requests", str(args.per_replica)]
    try:
        with SimCluster(
            engines=args.replicas,
            policy="round_robin",
            engine_args=engine_args,
            time_scale=args.time_scale,
            log_dir=log_dir,
        ) as cluster:
            smg_args = ["--max-concurrent-requests", str(limit)]
            smg_args += ["--queue-size", str(args.smg_queue_size)]
            smg_args += ["--queue-timeout-secs", str(args.smg_queue_timeout)]
            admitting = start_router(
                cluster.engine_urls, policy="round_robin", args=smg_args, log_dir=log_dir
            )
            try:
                mark_serving("fair", cluster.url, args.replicas)
                mark_serving("plain", cluster.url, args.replicas)
                mark_serving("smg", admitting.url, args.replicas)
                fair, fair_url = start_gateway(db_name, log_dir)
                plain, plain_url = start_gateway(db_name, log_dir, GATEWAY_FAIR_ADMISSION="off")
                setups = [
                    Setup("fair", f"{fair_url}/endpoints/fair/v1"),
                    Setup("plain", f"{plain_url}/endpoints/plain/v1"),
                    Setup("smg", f"{plain_url}/endpoints/smg/v1"),
                    Setup("control", f"{fair_url}/endpoints/fair/v1", flood_key="unknown"),
                ]
                keys["unknown"] = "pli_000000000000_" + "x" * 40  # well formed, no one's
                print(f"logs in {log_dir}; {os.cpu_count()} CPUs", flush=True)
                rate = asyncio.run(measure(setups, keys, args))
                print(
                    f"\n{args.replicas} engines x {args.per_replica} running, limit {limit}; normal"
                    " key "
                    f"{args.normal_rps}/s, flood {args.flood_factor}x capacity = "
                    f"{rate * args.flood_factor:.0f}/s, {args.seconds:g} s per phase\n"
                )
                print_table(setups)
            finally:
                admitting.stop()
    finally:
        stop(fair)
        stop(plain)
        drop_database(db_name)


if __name__ == "__main__":
    main()
