"""Plinth's deployed routing vs smg's defaults vs round robin, on three workloads (not a test).

Four simulated engines behind the real smg router. Closed-loop clients (the load level is their
number) stream chat completions for a fixed wall-clock time per run; every run starts fresh engines
and a fresh router. Workloads:

- ``shared-prefix``: 16 tenants, each with a 3,000-token system prompt shared by all of its
  requests; questions are short and tenants equally busy.
- ``multi-turn``: each client holds a chat for six turns (a 1,000-token system prompt of one of 16
  tenants, then every earlier question and answer), then starts a new one. Each turn's prompt
  extends the previous turn's, so its cache lives on whichever engine served the conversation.
- ``many-tenant``: 96 tenants with 1,500-token system prompts and Zipf-skewed traffic (a few hot
  tenants, a long tail): more prefix tokens than the whole fleet's KV cache holds (96 x 1,500 vs
  4 x ~18,000), so the tail misses whatever the router does, and hot tenants pull load.

Router configurations: ``plinth`` is what a deployed endpoint gets by default: the flags of
``runtime.launch`` (``smg_policy`` and ``cache_aware_args`` of ``PLINTH_ROUTING``, the argv
builder the local driver and the Kubernetes render use) and, since its placement is
``by_count``, the gateway's placement (``gateway.placement``, in Redis: ``--redis-url``): each
routing key to the replica holding the fewest keys, named in ``x-smg-target-worker``.
``plinth_tree`` is the placement a spec may choose instead (``routing.placement: first_fit``):
smg's cache-aware tree with Plinth's knobs. Every request carries the routing key Plinth's
gateway adds to what it forwards, computed by the same function (``runtime.routing_key``);
routers not told to read that header ignore it. ``smg`` is cache-aware with smg 1.13's own
defaults (no flags); ``prefix_hash`` is smg's consistent-hash ring over the prompt's head with its
bounded load (a ``routing.policy`` a spec may pick); ``round_robin`` is the baseline. Printed
per run: prefix-cache hit rate (engine counters: cached / prompt tokens), TTFT p50 and p90 as
the clients saw them, throughput, in simulated time, and how many tenants each engine got in
the warm-up (sorted, e.g. ``5/4/4/3``).

The deployment is a real but memory-tight shape (Qwen3-32B in FP8 on one L40S per replica), so one
replica's KV cache holds only a few tenants' prompts while the fleet's holds them all (on
shared-prefix): the regime in which routing by prefix matters. Without load-balance fallback the
placement smg makes for a tenant's first request sticks, and it is uneven from run to run
(5/4/4/3 most often, 9/3/2/2 seen): an engine given six or more thrashes its cache, so repeat runs
differ. smg 1.13 places a prefix it has not seen without regard to how many prefixes a worker
already holds: all 16 tenants' first requests at once put 13/1/1/1 or 7/7/1/1, one at a time
6/4/3/3 or 6/5/3/2 (see ``runtime.spec``'s ``PLINTH_ROUTING``). The gateway's placement counts
the keys each replica holds, whether the tenants' first requests overlap (``--warm-up waves``,
the default) or arrive alone (``--warm-up one-by-one``). Run: ``python bench/routing.py``
(about twelve minutes; ``--workloads`` and ``--routers`` pick a subset).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis
import redis.asyncio as aioredis

from gateway.placement import Placements
from runtime.launch import cache_aware_args, gateway_places, smg_policy
from runtime.routing_key import ROUTING_KEY_HEADER, TARGET_WORKER_HEADER, routing_key
from runtime.sim.launcher import SimCluster, free_port, http_get
from runtime.sim.tokenizer import Tokenizer
from runtime.spec import PLINTH_ROUTING

WORDS = (
    *("account", "billing", "invoice", "refund", "policy", "order", "shipping", "warranty"),
    *("contract", "region", "customer", "support", "escalation", "priority", "ticket"),
    *("product", "feature", "release", "status", "outage", "incident", "review", "compliance"),
    *("security", "access", "report", "quarter", "forecast", "pipeline", "partner", "pricing"),
)

WORKLOADS = ("shared-prefix", "multi-turn", "many-tenant")
# Name -> (smg policy, extra smg flags). "smg" passes no flags: whatever smg 1.13 defaults to.
# "plinth_tree" is the placement a spec may choose instead: smg's tree, with Plinth's knobs.
_TREE = replace(PLINTH_ROUTING, placement="first_fit")
CONFIGS: dict[str, tuple[str, list[str]]] = {
    "round_robin": ("round_robin", []),
    "smg": ("cache_aware", []),
    "prefix_hash": ("prefix_hash", []),
    "plinth": (smg_policy("cache_aware", PLINTH_ROUTING), cache_aware_args(PLINTH_ROUTING)),
    "plinth_tree": (smg_policy("cache_aware", _TREE), cache_aware_args(_TREE)),
}
# The configurations whose requests the gateway places (as a deployed endpoint's would be).
PLACED = {
    "plinth": gateway_places("cache_aware", PLINTH_ROUTING.placement, split=False),
    "plinth_tree": gateway_places("cache_aware", _TREE.placement, split=False),
}


@dataclass
class GatewayPart:
    """What Plinth's gateway adds to a forwarded request: the routing key and, for a pool it
    places, the replica slot (``gateway.placement``, the gateway's own code and Redis table)."""

    placements: Placements | None = None
    pool: str = ""
    slots: int = 0

    async def headers(self, body: dict[str, object]) -> dict[str, str]:
        key = routing_key(body)
        if key is None:
            return {}
        headers = {ROUTING_KEY_HEADER: key}
        if self.placements is not None:
            slot = await self.placements.slot(self.pool, key, self.slots, time.time())
            if slot is not None:  # None only once the router refused every slot (never here)
                headers[TARGET_WORKER_HEADER] = str(slot)
        return headers


HIT_COUNTERS = ("sglang:prompt_tokens_total", "sglang:cached_tokens_total")
REQUESTS = "sglang:num_requests_total"


@dataclass
class RunResult:
    workload: str
    config: str
    load: int
    ttfts: list[float] = field(default_factory=list)
    completed: int = 0
    output_tokens: int = 0
    errors: int = 0
    sim_seconds: float = 0.0
    hit_rate: float = 0.0
    placement: list[int] = field(default_factory=list)  # tenants per engine after the warm-up

    @property
    def req_per_s(self) -> float:
        return self.completed / self.sim_seconds if self.sim_seconds else 0.0

    @property
    def tok_per_s(self) -> float:
        return self.output_tokens / self.sim_seconds if self.sim_seconds else 0.0

    def ttft(self, q: float) -> float:
        if len(self.ttfts) < 2:
            return float("nan")
        return statistics.quantiles(self.ttfts, n=100)[int(q * 100) - 1]


def system_prompts(tenants: int, tokens: int, seed: int) -> list[str]:
    tokenizer, rng = Tokenizer(), random.Random(seed)
    prompts = []
    for t in range(tenants):
        text = f"You are the assistant of tenant {t}. Follow these house rules carefully."
        while tokenizer.count(text) < tokens:
            text += " " + " ".join(rng.choice(WORDS) for _ in range(12)) + "."
        prompts.append(text)
    return prompts


@dataclass(frozen=True)
class Workload:
    """Who asks what: the tenants' system prompts, how they are picked, how long a chat lasts."""

    name: str
    prompts: list[str]
    weights: list[float]
    turns: int  # questions per conversation; 1: every request starts afresh

    @classmethod
    def named(cls, name: str, args: argparse.Namespace) -> Workload:
        if name == "shared-prefix":
            prompts = system_prompts(args.tenants, args.prefix_tokens, args.seed)
            return cls(name, prompts, [1.0] * len(prompts), 1)
        if name == "multi-turn":
            prompts = system_prompts(args.tenants, args.prefix_tokens // 3, args.seed)
            return cls(name, prompts, [1.0] * len(prompts), args.turns)
        if name == "many-tenant":
            prompts = system_prompts(args.tenants * 6, args.prefix_tokens // 2, args.seed)
            # Zipf (s=1): tenant k gets traffic in proportion to 1/k.
            return cls(name, prompts, [1 / (k + 1) for k in range(len(prompts))], 1)
        raise ValueError(name)


def question(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + "?"


async def client_loop(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    workload: Workload,
    rng: random.Random,
    deadline: float,
    result: RunResult,
    args: argparse.Namespace,
    gateway: GatewayPart,
) -> None:
    while time.monotonic() < deadline:
        (system,) = rng.choices(workload.prompts, workload.weights)
        messages = [{"role": "system", "content": system}]
        for _ in range(workload.turns):
            if time.monotonic() >= deadline:
                return
            messages.append({"role": "user", "content": question(rng)})
            body = request_body(model, messages, args.output_tokens)
            answer = await one_request(session, url, body, result, args.time_scale, gateway)
            if answer is None:
                break
            messages.append({"role": "assistant", "content": answer})


async def one_request(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, object],
    result: RunResult,
    time_scale: float,
    gateway: GatewayPart,
) -> str | None:
    """Stream one chat completion; its text, or None when it failed."""
    start, first, usage, text = time.monotonic(), None, None, []
    # The headers Plinth's gateway adds to every request it forwards, from the same code; only
    # a router told to read them (Plinth's by-count placement) does.
    headers = await gateway.headers(body)
    try:
        async with session.post(
            f"{url}/v1/chat/completions", json=body, headers=headers
        ) as response:
            if response.status != 200:
                result.errors += 1
                await response.read()
                return None
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if chunk.get("choices"):
                    first = first or time.monotonic()
                    text.append(chunk["choices"][0].get("delta", {}).get("content") or "")
                usage = chunk.get("usage") or usage
    except aiohttp.ClientError:
        result.errors += 1
        return None
    if first is None or usage is None:
        return None
    result.ttfts.append((first - start) * time_scale)
    result.completed += 1
    result.output_tokens += int(usage["completion_tokens"])
    return "".join(text)


def counter(urls: list[str], name: str) -> float:
    total = 0.0
    for url in urls:
        for line in http_get(f"{url}/metrics")[1].decode().splitlines():
            if line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def request_body(
    model: str, messages: list[dict[str, str]], output_tokens: int
) -> dict[str, object]:
    return {
        "model": model,
        "messages": list(messages),
        "max_tokens": output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def warm_up(
    session: aiohttp.ClientSession,
    cluster: SimCluster,
    prompts: list[str],
    args: argparse.Namespace,
    gateway: GatewayPart,
) -> None:
    """One request per tenant, so each policy has placed every tenant before measuring.

    ``waves``: one per engine at a time (a router deciding many cold requests at once sees the
    same loads for all of them and may stack them on one worker). ``one-by-one``: each alone,
    nothing in flight, as tenants trickling in on a quiet endpoint would arrive.
    """
    scratch = RunResult("warm-up", "", 0)
    wave = len(cluster.engines) if args.warm_up == "waves" else 1
    for start in range(0, len(prompts), wave):
        bodies = [
            request_body(cluster.model, [{"role": "system", "content": p}, hello], 1)
            for p in prompts[start : start + wave]
            for hello in ({"role": "user", "content": "Hello?"},)
        ]
        await asyncio.gather(
            *(
                one_request(session, cluster.url, b, scratch, args.time_scale, gateway)
                for b in bodies
            )
        )


async def drive(cluster: SimCluster, result: RunResult, args: argparse.Namespace) -> None:
    workload = Workload.named(result.workload, args)
    rng = random.Random(args.seed)
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=0)
    client = aioredis.Redis.from_url(args.redis_url) if PLACED.get(result.config) else None
    gateway = GatewayPart()
    if client is not None:
        # A pool of its own per run: a fresh router, whose slots mean fresh replicas.
        gateway = GatewayPart(Placements(client), f"bench-{uuid.uuid4().hex}", len(cluster.engines))
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await warm_up(session, cluster, workload.prompts, args, gateway)
        placed = [int(counter([url], REQUESTS)) for url in cluster.engine_urls]
        result.placement = sorted(placed, reverse=True)
        before = [counter(cluster.engine_urls, name) for name in HIT_COUNTERS]
        start = time.monotonic()
        deadline = start + args.duration
        loops = [
            client_loop(
                session,
                cluster.url,
                cluster.model,
                workload,
                random.Random(rng.random()),
                deadline,
                result,
                args,
                gateway,
            )
            for _ in range(result.load)
        ]
        await asyncio.gather(*loops)
    if client is not None:
        await client.aclose()
    result.sim_seconds = (time.monotonic() - start) * args.time_scale
    prompt, cached = (
        counter(cluster.engine_urls, n) - b for n, b in zip(HIT_COUNTERS, before, strict=True)
    )
    result.hit_rate = cached / prompt if prompt else 0.0


def run_once(workload: str, config: str, load: int, args: argparse.Namespace) -> RunResult:
    engine_args = [
        "--sim-gpu",
        args.gpu,
        "--quantization",
        args.quantization,
        "--stream-interval",
        "8",
        "--max-running-requests",
        "64",
    ]
    policy, router_args = CONFIGS[config]
    if config == "plinth":
        router_args = router_args + args.plinth_extra.split()
    result = RunResult(workload, config, load)
    with SimCluster(
        router_args=router_args,
        engines=args.engines,
        policy=policy,
        model=args.model,
        engine_args=engine_args,
        time_scale=args.time_scale,
    ) as cluster:
        asyncio.run(drive(cluster, result, args))
    return result


def print_table(results: list[RunResult], args: argparse.Namespace) -> None:
    print()
    print(
        f"{args.engines} engines x {args.model} ({args.quantization}) on 1x {args.gpu} each, "
        f"{args.output_tokens} output tokens, {args.duration:g} s wall per run, "
        f"time scale {args.time_scale:g}, warm-up {args.warm_up} (figures in simulated time)"
    )
    policy, flags = CONFIGS["plinth"]
    print(f"plinth = {policy} {' '.join(flags + args.plinth_extra.split())}")
    if PLACED["plinth"]:
        print("  and the gateway's placement by count (x-smg-target-worker), Redis at --redis-url")
    policy, flags = CONFIGS["plinth_tree"]
    print(f"plinth_tree = {policy} {' '.join(flags)} (every request carries the routing key)")
    print("smg = cache_aware with smg's defaults; prefix_hash with smg's defaults")
    header = f"{'workload':<14} {'load':>5} {'router':<12} {'hit rate':>8} {'TTFT p50':>9}"
    header += f" {'TTFT p90':>9} {'req/s':>7} {'out tok/s':>9} {'done':>5} {'errors':>6}"
    header += "  tenants/engine"
    print(header)
    for r in results:
        print(
            f"{r.workload:<14} {r.load:>5} {r.config:<12} {r.hit_rate:>8.1%} "
            f"{r.ttft(0.5):>8.2f}s {r.ttft(0.9):>8.2f}s {r.req_per_s:>7.2f} {r.tok_per_s:>9.1f} "
            f"{r.completed:>5} {r.errors:>6}  {'/'.join(map(str, r.placement))}"
        )
    for workload in args.workloads:
        for load in args.loads:
            runs = {r.config: r for r in results if r.workload == workload and r.load == load}
            plinth = runs.get("plinth")
            for peer in ("plinth_tree", "smg", "prefix_hash", "round_robin"):
                other = runs.get(peer)
                if plinth is None or other is None:
                    continue
                print(
                    f"{workload} at load {load}: plinth / {peer}: "
                    f"throughput x{_ratio(plinth.req_per_s, other.req_per_s)}, "
                    f"hit rate x{_ratio(plinth.hit_rate, other.hit_rate)}, "
                    f"TTFT p50 x{_ratio(other.ttft(0.5), plinth.ttft(0.5))} lower"
                )


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "inf"


def _names(choices: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        names = [n for n in text.split(",") if n]
        if unknown := set(names) - set(choices):
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(sorted(unknown))}")
        return names

    return parse


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=_names(WORKLOADS), default=list(WORKLOADS))
    parser.add_argument("--routers", type=_names(tuple(CONFIGS)), default=list(CONFIGS))
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--model", default="Qwen/Qwen3-32B")
    parser.add_argument("--gpu", default="L40S")
    parser.add_argument("--quantization", default="fp8")
    parser.add_argument("--tenants", type=int, default=16)
    parser.add_argument("--prefix-tokens", type=int, default=3000)
    parser.add_argument("--turns", type=int, default=6, help="questions per multi-turn chat")
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--loads", type=lambda s: [int(x) for x in s.split(",")], default=[64])
    parser.add_argument("--duration", type=float, default=25.0, help="wall seconds per run")
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warm-up", choices=("waves", "one-by-one"), default="waves")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15",
        help="Redis for the gateway's placement table (a pool of its own per run); when none "
        "answers there, the bench starts the redis-server `make run` embeds, and stops it after",
    )
    parser.add_argument(
        "--plinth-extra",
        default="",
        help="smg flags appended to plinth's (the last of a flag wins): to measure other defaults",
    )
    return parser.parse_args()


def placement_redis(url: str, data_dir: Path) -> tuple[str, subprocess.Popen[bytes] | None]:
    """A Redis for the gateway's placement table: the one at ``url``, or when none answers there
    the redis-server `make run` embeds (``scripts/run.py``), started on a free port."""
    try:
        redis.Redis.from_url(url, socket_timeout=2).ping()
        return url, None
    except redis.ConnectionError:
        pass
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from run import StartError, redis_argv, wait_for_port  # scripts/ is not a package

    port = free_port()
    server = subprocess.Popen(redis_argv(port, data_dir, appendonly=False))
    try:
        wait_for_port(port, "the embedded redis-server", proc=server)
    except StartError as exc:
        server.kill()
        raise SystemExit(f"no Redis at {url}, and {exc}") from exc
    return f"redis://127.0.0.1:{port}/0", server


def main() -> None:
    args = parse_args()
    server = None
    if any(PLACED.get(name) for name in args.routers):
        data_dir = Path(tempfile.mkdtemp(prefix="plinth-bench-routing-redis-"))
        args.redis_url, server = placement_redis(args.redis_url, data_dir)
    try:
        run_all(args)
    finally:
        if server is not None:
            server.kill()
            server.wait()


def run_all(args: argparse.Namespace) -> None:
    results = []
    for workload in args.workloads:
        for load in args.loads:
            for config in args.routers:
                result = run_once(workload, config, load, args)
                print(
                    f"  {workload} / {config} at load {load}: {result.completed} requests, "
                    f"hit rate {result.hit_rate:.1%}, tenants per engine after the warm-up "
                    f"{'/'.join(map(str, result.placement))}",
                    flush=True,
                )
                results.append(result)
    print_table(results, args)


if __name__ == "__main__":
    main()
