"""Fair sharing under overload: one key floods an endpoint at 5x its capacity beside a normal key.

Not a test. One run starts simulated engines (each running at most ``--per-replica`` requests at
once, queueing the rest first come, first served) behind the real smg router, and Plinth's
gateway (``python -m gateway``) on a throw-away database, four ways side by side:

- ``fair``: the gateway with fair admission (``gateway.admission``, the default): the endpoint's
  limit is replicas x its ``autoscaling.concurrency_target`` (``--target``, below the engines'
  ``--per-replica`` running requests, as a target usually is), waiting requests are admitted
  fairly across keys and the overflow is refused with 429; and, the endpoint contended, the
  flood (over its fair share) is confined to its share of the engines (one of two) and of the
  limit, the normal key placed on the other engine (``gateway.isolation``; every endpoint here
  is routed ``cache_aware`` placed ``by_count``, the default, so the gateway names each
  request's engine);
- ``plain``: the same gateway with ``GATEWAY_FAIR_ADMISSION=off``: everything goes to the engines;
- ``smg``: ``plain`` in front of a second smg router over the same engines with smg's own
  admission (``--max-concurrent-requests`` = the same limit, ``--queue-size``,
  ``--queue-timeout-secs``), which knows no keys;
- ``control``: ``fair`` with a flood whose key no organization has, refused 401 by the gateway
  before any queue or engine: what the flood's client and the gateway's refusals cost the normal
  key on this machine's shared cores, with nothing shared on the engines.

The engines simulate what a user would run: Llama-3.1-8B-Instruct on one H100 SXM each (the
simulator's catalogue physics, in real time), and every request has its own ~1,000-token prompt,
so an unloaded TTFT is mostly the engine's ~24 ms prefill. (Until 2026-12-05 every request sent
the same prompt: a prefix-cache hit, a one-token prefill of ~6 ms, and a TTFT that was half the
Python processes' time on this machine's 2 shared cores; ``--same-prompt`` runs it that way.)
The engines run at the lowest CPU priority (``--engine-nice``), as in ``bench/gateway.py``:
they stand in for GPU servers on other machines.

Per setup, first the normal key alone (its unloaded TTFT), then the same normal traffic while
the flood key sends open-loop at ``--flood-factor`` x the endpoint's capacity (capacity: the
requests per second the engines complete at the limit, measured first by closed-loop clients).
Printed per setup: the normal key's TTFT p50/p90 unloaded and under the flood, its lost
requests (anything but 200), and the flood's answers: served, 429, other errors, timeouts
(no answer within ``--client-timeout``). Streamed completions; TTFT is the first token event.
Then each normal TTFT's split, matched by request id to the engines' per-request records
(SGLang's ``--export-metrics-to-file``): the engine's part in simulated time (``queue_time``:
waiting for the step in progress or requests ahead; ``prefill_launch_latency``: its prefill)
and the rest in wall time (smg, the gateway, the client, the shared cores). The engine's part
does not depend on how loaded the host is; the rest does.

Run: ``python bench/fairness.py`` (about four and a half minutes; PostgreSQL and Redis from
DATABASE_URL / REDIS_URL; ``--setups fair control`` for two of the four, about two minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable
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

from load import Answer, closed_loop, open_loop, send  # noqa: E402  (beside this script)

from runtime.launch import cache_aware_args, smg_policy  # noqa: E402
from runtime.sim.launcher import SimCluster, free_port, http_get, start_router  # noqa: E402
from runtime.spec import PLINTH_ROUTING  # noqa: E402

# What the engines simulate and the requests name: a model a user would serve, on the simulated
# engines' default GPU (an H100 SXM), so a TTFT is mostly the engine's prefill of the prompt.
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# About 1,000 prompt tokens (a ~24 ms prefill on one H100), each request's its own (see prompt()).
PROMPT = "Summarise the quarterly report of the northern region in one line. " * 71


def prompt(same: bool = False) -> str:
    """A prompt no other request shares: a user's requests differ, and a prompt every request
    repeated would be a prefix-cache hit, leaving the engine a one-token prefill and the bench
    measuring the processes in front of it instead (``same``: that prompt, for comparison)."""
    return PROMPT if same else f"Request {uuid.uuid4().hex}. {PROMPT}"


@dataclass
class Traffic:
    """What one key's requests got in one phase."""

    ttft: dict[str, float] = field(default_factory=dict)  # seconds, by response id
    served: int = 0
    refused: int = 0  # 429
    errors: int = 0  # any other status, or a broken connection
    timeouts: int = 0  # no answer within the client's timeout

    @property
    def lost(self) -> int:
        return self.refused + self.errors + self.timeouts

    def count(self, answer: Answer) -> None:
        if answer.timed_out:
            self.timeouts += 1
        elif answer.status == 429:
            self.refused += 1
        elif answer.status != 200:
            self.errors += 1
        else:
            self.served += 1
            if answer.ttft is not None:
                self.ttft[answer.response_id or f"unnamed-{len(self.ttft)}"] = answer.ttft


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` in ms (0 when empty)."""
    ordered = sorted(values)
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
        # The default routing: the gateway places each request on a replica (gateway.placement),
        # which is what lets it keep a flood off the normal key's replicas (isolation).
        "routing": {"policy": "cache_aware"},
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
        "prompt": prompt(args.same_prompt),
        "max_tokens": args.max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {key}"}
    answer = await send(session, f"{url}/completions", body, headers, args.client_timeout)
    traffic.count(answer)


async def capacity(
    session: aiohttp.ClientSession, url: str, key: str, limit: int, args: argparse.Namespace
) -> float:
    """Requests per second the engines complete with ``limit`` in flight (closed loop)."""
    traffic = Traffic()
    wall = await closed_loop(
        limit, args.seconds / 2, lambda: one_request(session, url, key, traffic, args)
    )
    return traffic.served / wall


def keep_sending(
    session: aiohttp.ClientSession,
    url: str,
    key: str,
    rate: float,
    traffic: Traffic,
    args: argparse.Namespace,
) -> Awaitable[None]:
    """One key's open-loop traffic for one phase."""
    return open_loop(rate, args.seconds, lambda: one_request(session, url, key, traffic, args))


async def measure(setups: list[Setup], keys: dict[str, str], args: argparse.Namespace) -> float:
    limit = args.target * args.replicas
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        rate = await capacity(session, setups[0].base_url, keys["normal"], limit, args)
        print(f"capacity: {rate:.1f} requests/s at {limit} in flight", flush=True)
        for setup in setups:
            url, normal = setup.base_url, keys["normal"]
            await keep_sending(session, url, normal, args.normal_rps, setup.unloaded, args)
            await asyncio.gather(
                keep_sending(session, url, normal, args.normal_rps, setup.normal, args),
                keep_sending(
                    session, url, keys[setup.flood_key], rate * args.flood_factor, setup.flood, args
                ),
            )
            print(f"  {setup.name} done", flush=True)
    return rate


# ---- report -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineTiming:
    """What the engine's per-request record says of one request (simulated seconds)."""

    queue: float  # from arrival in the engine to its first forward batch (SGLang's queue_time)
    prefill: float  # that batch's prefill, to the first token (prefill_launch_latency)
    decode_step: float = 0.0  # its mean step after the first token: (e2e - TTFT) / (tokens - 1)

    @property
    def ttft(self) -> float:
        return self.queue + self.prefill


def engine_timings(directory: Path) -> dict[str, EngineTiming]:
    """The engines' ``--export-metrics-to-file`` records by request id."""
    found: dict[str, EngineTiming] = {}
    for path in directory.glob("sglang-request-metrics-*.log"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if "prefill_launch_latency" in record:
                queue, prefill = record["queue_time"], record["prefill_launch_latency"]
                steps = max(1, record.get("completion_tokens", 1) - 1)
                decode = (record.get("e2e_latency", queue + prefill) - queue - prefill) / steps
                found[record["id"]] = EngineTiming(queue, prefill, decode)
    return found


def print_tables(
    setups: list[Setup], engine: dict[str, EngineTiming], seconds: float, replicas: int
) -> None:
    header = (
        f"{'setup':<8}{'p50 alone':>10}{'p50 flood':>10}{'p90 alone':>10}{'p90 flood':>10}"
        f"{'p90 +%':>8}{'normal lost':>13}{'flood ok':>9}{'429':>7}{'other':>7}{'timeout':>8}"
    )
    _print_head(header)
    for s in setups:
        alone, flooded = list(s.unloaded.ttft.values()), list(s.normal.ttft.values())
        p90_alone, p90_flood = pct(alone, 0.9), pct(flooded, 0.9)
        change = (p90_flood / p90_alone - 1) * 100 if p90_alone else float("nan")
        print(
            f"{s.name:<8}{pct(alone, 0.5):10.1f}{pct(flooded, 0.5):10.1f}"
            f"{p90_alone:10.1f}{p90_flood:10.1f}{change:8.1f}"
            f"{s.normal.lost:>7}/{s.normal.served + s.normal.lost:<5}{s.flood.served:>9}"
            f"{s.flood.refused:>7}{s.flood.errors:>7}{s.flood.timeouts:>8}"
        )
    print(
        "TTFT in ms of the normal key alone and beside the flood, as its client saw it. normal"
        " lost: its requests not answered 200, of all it sent beside the flood.\n"
    )
    print_split(setups, engine)
    print_floor(setups, engine, seconds, replicas)


def _print_head(header: str) -> None:
    print(header)
    print("-" * len(header))


def print_floor(
    setups: list[Setup], engine: dict[str, EngineTiming], seconds: float, replicas: int
) -> None:
    """An estimate of what the pass in progress alone would cost a request arriving at an engine
    the flood keeps busy: the floor of sharing engines with the flood, which the fair setup's
    isolation (``gateway.isolation``) avoids by keeping the flood on its shard of the replicas
    and the normal key off it; to read beside the measured ``eng queue``.

    An engine runs whole forward passes: a request that arrives mid-pass waits for its end
    (SGLang schedules the next batch only then; priority scheduling reorders the waiting queue,
    it does not cut a pass short). Under the flood an engine is never idle: a share ``f`` of its
    time goes to the flood's prefills (``P`` each, the median of the flood's records), the rest
    to decode steps (``D``: a flood request's time from first token to last over its tokens,
    the prefills it sat through included). A request arriving at a random moment waits out what
    is left of the pass it lands in: P(wait > x) = f (1 - x/P)+ + (1 - f) (1 - x/D)+. No
    admission in front of the engines removes that wait while the flood has their capacity.
    The estimate assumes one prefill per pass and uniform arrivals; the measured queue can read
    lower, also because an engine that falls behind real time on this loaded host stamps an
    arrival later inside the step it came in during (``runtime.sim.clock``).
    """
    for s in setups:
        flood = [engine[rid] for rid in s.flood.ttft if rid in engine]
        alone = [t.ttft for rid, t in engine.items() if rid in s.unloaded.ttft]
        if not flood or not alone:
            continue
        prefill = sorted(t.prefill for t in flood)[len(flood) // 2]
        decode = sorted(t.decode_step for t in flood)[len(flood) // 2]
        share = min(1.0, len(flood) / seconds / max(1, replicas) * prefill)
        wait_ms = _residual_p90(share, prefill, decode) * 1000
        base_ms = _p90(alone)  # pct() answers in ms
        print(
            f"{s.name}: the flood's passes: prefill {prefill * 1000:.1f} ms, decode step"
            f" {decode * 1000:.1f} ms, {share:.0%} of each engine's time in the flood's prefills;"
            f" on an engine shared with the flood (spread over all {replicas}), the wait for the"
            f" pass in progress would be ~{wait_ms:.1f} ms at p90, {wait_ms / base_ms:.0%} of"
            f" the engine's unloaded TTFT p90 ({base_ms:.1f} ms)"
        )


def _residual_p90(share: float, prefill: float, decode: float) -> float:
    """x with P(wait > x) = 0.1 for the wait described in ``print_floor`` (bisection)."""

    def over(x: float) -> float:
        return share * max(0.0, 1 - x / prefill) + (1 - share) * max(0.0, 1 - x / decode)

    low, high = 0.0, max(prefill, decode)
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if over(mid) > 0.1 else (low, mid)
    return (low + high) / 2


def print_split(setups: list[Setup], engine: dict[str, EngineTiming]) -> None:
    """The normal key's TTFT p90 split: the engine's part and the rest, alone -> flood."""
    header = (
        f"{'setup':<8}{'client':>16}{'engine':>16}{'eng queue':>16}{'eng prefill':>16}"
        f"{'rest':>16}{'eng queue max':>16}"
    )
    _print_head(header)
    for s in setups:
        phases = [_split(s.unloaded, engine), _split(s.normal, engine)]
        cells = [_change(_p90(phases[0][part]), _p90(phases[1][part])) for part in range(5)]
        worst = [max(values[2], default=0.0) * 1000 for values in phases]
        print(f"{s.name:<8}" + "".join(cells) + _change(*worst))
    print(
        "p90 in ms, alone -> beside the flood, of the normal key's requests that the engines"
        " recorded. engine: TTFT inside the engine in simulated time (eng queue: arrival to its"
        " first forward batch, waiting for the step in progress and for requests ahead of it;"
        " eng prefill: that batch); rest: client TTFT minus the engine's part (smg, the gateway,"
        " the client, the engines' HTTP handling and the host's shared cores, in wall time)."
    )


def _split(traffic: Traffic, engine: dict[str, EngineTiming]) -> list[list[float]]:
    """[client, engine, engine queue, engine prefill, rest] TTFTs of the recorded requests."""
    known = [rid for rid in traffic.ttft if rid in engine]
    client = [traffic.ttft[rid] for rid in known]
    timing = [engine[rid] for rid in known]
    inside = [t.ttft for t in timing]
    rest = [c - e for c, e in zip(client, inside, strict=True)]
    return [client, inside, [t.queue for t in timing], [t.prefill for t in timing], rest]


def _change(alone: float, flooded: float) -> str:
    return f"{f'{alone:.1f} -> {flooded:.1f}':>16}"


def _p90(values: list[float]) -> float:
    return pct(values, 0.9)


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
    parser.add_argument(
        "--setups",
        nargs="+",
        default=["fair", "plain", "smg", "control"],
        choices=["fair", "plain", "smg", "control"],
        help="which setups to run, in this order",
    )
    parser.add_argument(
        "--same-prompt",
        action="store_true",
        help="every request the same prompt (prefix-cache hits: a one-token prefill), as the"
        " bench ran before 2026-12-05, for comparison",
    )
    # As in bench/gateway.py: the engines stand in for GPU servers on other machines; at the
    # lowest CPU priority they do not take the cores smg, the gateway and the clients need.
    parser.add_argument("--engine-nice", type=int, default=19, help="the engines' nice value")
    parser.add_argument("--smg-queue-size", type=int, default=64)
    parser.add_argument("--smg-queue-timeout", type=int, default=30)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="plinth-bench-fairness-"))
    db_name, keys = create_database(args)
    fair = plain = None
    limit = args.target * args.replicas
    records = log_dir / "engine-requests"
    engine_args = ["--max-running-requests", str(args.per_replica)]
    engine_args += ["--export-metrics-to-file", "--export-metrics-to-file-dir", str(records)]
    try:
        with SimCluster(
            engines=args.replicas,
            model=MODEL,
            # The router a placed revision gets (runtime.launch.router_args).
            policy=smg_policy("cache_aware", PLINTH_ROUTING),
            router_args=cache_aware_args(PLINTH_ROUTING),
            engine_args=engine_args,
            time_scale=args.time_scale,
            log_dir=log_dir,
        ) as cluster:
            for engine in cluster.engines:
                os.setpriority(os.PRIO_PROCESS, engine.popen.pid, args.engine_nice)
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
                setups = [s for s in setups if s.name in args.setups]
                keys["unknown"] = "pli_000000000000_" + "x" * 40  # well formed, no one's
                print(f"logs in {log_dir}; {os.cpu_count()} CPUs", flush=True)
                rate = asyncio.run(measure(setups, keys, args))
                print(
                    f"\n{args.replicas} engines x {args.per_replica} running, limit {limit}; normal"
                    " key "
                    f"{args.normal_rps}/s, flood {args.flood_factor}x capacity = "
                    f"{rate * args.flood_factor:.0f}/s, {args.seconds:g} s per phase\n"
                )
                print_tables(setups, engine_timings(records), args.seconds, args.replicas)
            finally:
                admitting.stop()
    finally:
        stop(fair)
        stop(plain)
        drop_database(db_name)


if __name__ == "__main__":
    main()
