"""Failed requests per engine kill: Plinth's gateway and router vs references (not a test).

One run: N simulated engines behind the real smg router, and two of Plinth's gateways (the
gateway's own code, ``gateway.app.Gateway``, built in process from a one-endpoint route table,
sharing one Redis as two gateway processes would) taking requests in turn. Steady traffic
(``--rate`` requests a second, open loop) sends chats of ``2 x N`` tenants (each tenant its own
long system prompt, so its own routing key; ``--output-tokens`` long answers), streamed and
not, until every tenant has been answered a few times; then one engine, picked at random, is
killed (SIGKILL), and the traffic goes on until the router has noticed (its health checks mark
the engine unhealthy) and ``--after`` requests have been sent since the engine exited.
Counted, per run:

- requests sent after the engine exited, and how many of them failed: none of them can have
  reached the dead engine, so every failure here is routing's;
- requests in flight at the kill (sent before the engine exited, not answered before it was
  killed), and how many failed: those the dead engine may have been running.

A request failed unless it was answered 200 and whole (choices, or a stream that ends in
``[DONE]`` with no error event). Configurations (``--configs``):

- ``plinth``: what a deployed endpoint gets by default: the router flags of ``runtime.launch``
  (``consistent_hashing``, the gateway's routing key, smg's retries off) and the gateway's
  placement by count, which sends a request that reached no engine to another replica and marks
  the slot down for both gateways (``gateway.placement``);
- ``by_hash``: the same router without the gateway's placement: each key goes by its hash, and
  smg keeps sending the dead replica's keys to it until its health checks fail;
- ``first_fit``: the placement a spec may choose instead (smg's cache-aware tree with Plinth's
  knobs, smg's retries on), the default before placement by count;
- ``round_robin``: smg's round robin with its defaults.

The router checks its workers' health every second here (``runtime.sim.launcher``); a deployed
router checks every ``ROUTER_HEALTH_CHECK_SECONDS`` (10), so the window in which a router that is
left to itself sends requests to a dead replica lasts about ten times longer there. Figures are
counts, not timings. Redis: a redis-server of the bench's own (the one ``make run`` embeds), so
nothing is left in another. Run: ``python bench/replica_failure.py`` (about six minutes).
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
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PLINTH_ENV", "test")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from controlplane.keys import generate_key  # noqa: E402
from gateway.app import Gateway  # noqa: E402
from gateway.config import GatewayConfig  # noqa: E402
from gateway.routes import Endpoint, InferenceKey, RouteTable  # noqa: E402
from runtime.launch import cache_aware_args, gateway_places, smg_policy  # noqa: E402
from runtime.sim.launcher import SimCluster, free_port, router_workers  # noqa: E402
from runtime.spec import PLINTH_ROUTING  # noqa: E402

_TREE = replace(PLINTH_ROUTING, placement="first_fit")
# Name -> (smg policy, smg flags, whether the gateway places the requests).
CONFIGS: dict[str, tuple[str, list[str], bool]] = {
    "plinth": (
        smg_policy("cache_aware", PLINTH_ROUTING),
        cache_aware_args(PLINTH_ROUTING),
        gateway_places("cache_aware", PLINTH_ROUTING.placement, split=False),
    ),
    "by_hash": (smg_policy("cache_aware", PLINTH_ROUTING), cache_aware_args(PLINTH_ROUTING), False),
    "first_fit": (smg_policy("cache_aware", _TREE), cache_aware_args(_TREE), False),
    "round_robin": ("round_robin", [], False),
}
SLUG = "bench"


@dataclass
class Sent:
    started: float
    ended: float
    ok: bool


@dataclass
class RunResult:
    config: str
    replicas: int
    sent_after: int = 0
    failed_after: int = 0
    in_flight: int = 0
    failed_in_flight: int = 0
    notes: list[str] = field(default_factory=list)


def system_prompt(tenant: int) -> str:
    return f"You answer for tenant number {tenant} of the bench. Be brief and exact. " * 30


def route_table(router_url: str, replicas: int, placed: bool) -> tuple[RouteTable, str]:
    """One endpoint behind ``router_url`` and one inference key for it (no database)."""
    new = generate_key("inference")
    org = str(uuid.uuid4())
    endpoint = Endpoint(
        str(uuid.uuid4()), SLUG, org, "running", "running", replicas, router_url, placed=placed
    )
    key = InferenceKey(
        str(uuid.uuid4()), new.prefix, new.key_hash, org, frozenset(), None, None, None
    )
    table = RouteTable(endpoints={SLUG: endpoint}, keys={new.prefix: key}, loaded_at=time.time())
    return table, new.plaintext


async def send(
    client: httpx.AsyncClient, api_key: str, tenant: int, stream: bool, tokens: int
) -> Sent:
    messages = [
        {"role": "system", "content": system_prompt(tenant)},
        {"role": "user", "content": f"Question {random.random():.6f}?"},
    ]
    body = {"model": "sim/llama-test", "messages": messages, "max_tokens": tokens}
    body.update(stream=stream, ignore_eos=True)
    started = time.monotonic()
    try:
        answer = await client.post(
            f"/endpoints/{SLUG}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=60,
        )
    except httpx.HTTPError:
        return Sent(started, time.monotonic(), False)
    text = answer.text
    if stream:
        ok = answer.status_code == 200 and text.rstrip().endswith("data: [DONE]")
        ok = ok and '"error"' not in text
    else:
        ok = answer.status_code == 200 and '"choices"' in text
    return Sent(started, time.monotonic(), ok)


def noticed(router_url: str, dead_url: str) -> bool:
    """The router no longer counts the dead engine healthy (or no longer lists it)."""
    workers = router_workers(router_url)
    return bool(workers) and all(
        not w.get("is_healthy", True) for w in workers if w.get("url") == dead_url
    )


async def run_once(config: str, replicas: int, seed: int, args: argparse.Namespace) -> RunResult:
    policy, router_flags, placed = CONFIGS[config]
    result = RunResult(config, replicas)
    rng = random.Random(seed)
    log_dir = Path(tempfile.mkdtemp(prefix=f"plinth-bench-failure-{config}-"))
    with SimCluster(
        engines=replicas,
        policy=policy,
        router_args=router_flags,
        time_scale=args.time_scale,
        log_dir=log_dir,
    ) as sim:
        table, api_key = route_table(sim.url, replicas, placed)
        gateways = [
            Gateway(GatewayConfig(redis_url=args.redis_url), lambda: table) for _ in range(2)
        ]
        for gateway in gateways:
            await gateway.startup()
        clients = [
            httpx.AsyncClient(transport=httpx.ASGITransport(app=g), base_url="http://gateway")
            for g in gateways
        ]
        sent: list[Sent] = []
        stop = asyncio.Event()
        tenants = 2 * replicas

        async def steady() -> None:
            """Open loop: a request every 1/rate seconds, whatever became of the earlier ones
            (a client that waited for each answer would send faster into a dead replica, since
            its failures come back at once)."""
            pending: set[asyncio.Task[None]] = set()

            async def one(n: int) -> None:
                gateway = clients[n % 2]
                stream = (n // tenants) % 2 == 1
                sent.append(await send(gateway, api_key, n % tenants, stream, args.output_tokens))

            n = 0
            while not stop.is_set():
                task = asyncio.create_task(one(n))
                pending.add(task)
                task.add_done_callback(pending.discard)
                n += 1
                await asyncio.sleep(1 / args.rate)
            await asyncio.gather(*pending)

        traffic = asyncio.create_task(steady())
        try:
            while len(sent) < tenants * 3:
                await asyncio.sleep(0.05)
            victim = sim.engines[rng.randrange(replicas)]
            killed = time.monotonic()
            victim.popen.kill()
            await asyncio.to_thread(victim.popen.wait)
            exited = time.monotonic()
            while True:
                after = sum(1 for s in sent if s.started > exited)
                if after >= args.after and await asyncio.to_thread(noticed, sim.url, victim.url):
                    break
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            await traffic
            for client in clients:
                await client.aclose()
            for gateway in gateways:
                await gateway.shutdown()
    for s in sent:
        if s.started > exited:
            result.sent_after += 1
            result.failed_after += not s.ok
        elif s.ended > killed:
            result.in_flight += 1
            result.failed_in_flight += not s.ok
    return result


def print_table(results: list[RunResult], args: argparse.Namespace) -> None:
    print()
    print(
        f"Failed requests per engine kill ({args.kills} kills per cell, {args.rate:g} requests/s, "
        f"2 x N tenants, {args.output_tokens} output tokens, time scale {args.time_scale:g}): "
        "failed / sent after the engine exited;"
        " failed / in flight at the kill. Summed over the kills."
    )
    header = "| configuration |"
    rule = "|---|"
    for n in args.replicas:
        header += f" {n} replicas: after exit | {n} replicas: in flight |"
        rule += "---|---|"
    print(header)
    print(rule)
    for config in args.configs:
        row = f"| {config} |"
        for n in args.replicas:
            cell = [r for r in results if r.config == config and r.replicas == n]
            failed_after = sum(r.failed_after for r in cell)
            sent_after = sum(r.sent_after for r in cell)
            failed_in = sum(r.failed_in_flight for r in cell)
            in_flight = sum(r.in_flight for r in cell)
            row += f" {failed_after} / {sent_after} | {failed_in} / {in_flight} |"
        print(row)


def private_redis(data_dir: Path) -> tuple[str, subprocess.Popen[bytes]]:
    """The redis-server `make run` embeds (``scripts/run.py``), on a free port, for this run."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from run import redis_argv, wait_for_port  # scripts/ is not a package

    port = free_port()
    server = subprocess.Popen(redis_argv(port, data_dir, appendonly=False))
    wait_for_port(port, "the embedded redis-server", proc=server)
    return f"redis://127.0.0.1:{port}/0", server


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    parser.add_argument("--replicas", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4])
    parser.add_argument("--kills", type=int, default=2, help="runs (one kill each) per cell")
    parser.add_argument("--rate", type=float, default=20.0, help="requests per second, in all")
    parser.add_argument("--after", type=int, default=100, help="requests sent after the exit")
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument(
        "--output-tokens", type=int, default=256, help="per answer: longer, more in flight"
    )
    return parser.parse_args()


async def run_all(args: argparse.Namespace) -> list[RunResult]:
    results = []
    for replicas in args.replicas:
        for config in args.configs:
            for seed in range(1, args.kills + 1):
                result = await run_once(config, replicas, seed, args)
                print(
                    f"  {config}, {replicas} replicas, kill {seed}: failed "
                    f"{result.failed_after} of {result.sent_after} sent after the exit, "
                    f"{result.failed_in_flight} of {result.in_flight} in flight",
                    flush=True,
                )
                results.append(result)
    return results


def main() -> None:
    args = parse_args()
    import django

    django.setup()
    args.redis_url, server = private_redis(Path(tempfile.mkdtemp(prefix="plinth-bench-redis-")))
    try:
        results = asyncio.run(run_all(args))
    finally:
        server.kill()
        server.wait()
    print_table(results, args)


if __name__ == "__main__":
    main()
