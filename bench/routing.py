"""Cache-aware vs round-robin routing on a multi-tenant shared-prefix workload (not a test).

Four simulated engines behind the real smg router. Each tenant has a long system prompt shared by
all of its requests; questions are short. Closed-loop clients (the load level is their number)
stream chat completions for a fixed wall-clock time per run; every run starts fresh engines and a
fresh router. Printed per run: prefix-cache hit rate (engine counters: cached / prompt tokens),
TTFT p50 and p90 as the clients saw them, and throughput, all in simulated time.

The deployment is a real but memory-tight shape (Qwen3-32B in FP8 on one L40S per replica), so one
replica's KV cache holds only a few tenants' prompts while the fleet's holds them all: the regime in
which routing by prefix matters. Run: ``python bench/routing.py`` (about two and a half minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime.sim.launcher import SimCluster, http_get
from runtime.sim.tokenizer import Tokenizer

WORDS = (
    *("account", "billing", "invoice", "refund", "policy", "order", "shipping", "warranty"),
    *("contract", "region", "customer", "support", "escalation", "priority", "ticket"),
    *("product", "feature", "release", "status", "outage", "incident", "review", "compliance"),
    *("security", "access", "report", "quarter", "forecast", "pipeline", "partner", "pricing"),
)

# smg 1.13 adds overload protection and warm-up diversion to cache-aware routing, and its
# load-balance fallback compares loads in units far larger than requests (with 4k-token prompts the
# default --balance-abs-threshold 64 abandons affinity on nearly every request). All of these move
# requests off the worker that holds their prefix, so they are switched off: the comparison is of
# the classic cache-aware policy the SGLang router published its gain with. Pass --router-args ""
# to measure smg's defaults instead.
ROUTER_ARGS = (
    "--disable-worker-overload-protection",
    "--worker-warmup-secs",
    "0",
    "--worker-warmup-divert-every",
    "0",
    "--balance-abs-threshold",
    "1000000",
    "--balance-rel-threshold",
    "100",
)
HIT_COUNTERS = ("sglang:prompt_tokens_total", "sglang:cached_tokens_total")


@dataclass
class RunResult:
    policy: str
    load: int
    ttfts: list[float] = field(default_factory=list)
    completed: int = 0
    output_tokens: int = 0
    errors: int = 0
    sim_seconds: float = 0.0
    hit_rate: float = 0.0

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


async def client_loop(
    session: aiohttp.ClientSession,
    url: str,
    model: str,
    prompts: list[str],
    rng: random.Random,
    deadline: float,
    result: RunResult,
    args: argparse.Namespace,
) -> None:
    while time.monotonic() < deadline:
        tenant = rng.randrange(len(prompts))
        question = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14))) + "?"
        body = request_body(model, prompts[tenant], question, args.output_tokens)
        await one_request(session, url, body, result, args.time_scale)


async def one_request(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, object],
    result: RunResult,
    time_scale: float,
) -> None:
    start, first, usage = time.monotonic(), None, None
    try:
        async with session.post(f"{url}/v1/chat/completions", json=body) as response:
            if response.status != 200:
                result.errors += 1
                await response.read()
                return
            async for raw in response.content:
                line = raw.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if first is None and chunk.get("choices"):
                    first = time.monotonic()
                usage = chunk.get("usage") or usage
    except aiohttp.ClientError:
        result.errors += 1
        return
    if first is not None and usage is not None:
        result.ttfts.append((first - start) * time_scale)
        result.completed += 1
        result.output_tokens += int(usage["completion_tokens"])


def counter(urls: list[str], name: str) -> float:
    total = 0.0
    for url in urls:
        for line in http_get(f"{url}/metrics")[1].decode().splitlines():
            if line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def request_body(model: str, system: str, question: str, output_tokens: int) -> dict[str, object]:
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ],
        "max_tokens": output_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def warm_up(
    session: aiohttp.ClientSession, cluster: SimCluster, prompts: list[str], time_scale: float
) -> None:
    """One request per tenant, so each policy has placed every tenant before measuring.

    They go in waves of one per engine: a router deciding many cold requests at once sees the same
    loads for all of them and may stack them on one worker.
    """
    scratch = RunResult("warm-up", 0)
    wave = len(cluster.engines)
    for start in range(0, len(prompts), wave):
        bodies = [
            request_body(cluster.model, p, "Hello?", 1) for p in prompts[start : start + wave]
        ]
        await asyncio.gather(
            *(one_request(session, cluster.url, b, scratch, time_scale) for b in bodies)
        )


async def drive(cluster: SimCluster, result: RunResult, args: argparse.Namespace) -> None:
    prompts = system_prompts(args.tenants, args.prefix_tokens, args.seed)
    rng = random.Random(args.seed)
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        await warm_up(session, cluster, prompts, args.time_scale)
        before = [counter(cluster.engine_urls, name) for name in HIT_COUNTERS]
        start = time.monotonic()
        deadline = start + args.duration
        loops = [
            client_loop(
                session,
                cluster.url,
                cluster.model,
                prompts,
                random.Random(rng.random()),
                deadline,
                result,
                args,
            )
            for _ in range(result.load)
        ]
        await asyncio.gather(*loops)
    result.sim_seconds = (time.monotonic() - start) * args.time_scale
    prompt, cached = (
        counter(cluster.engine_urls, n) - b for n, b in zip(HIT_COUNTERS, before, strict=True)
    )
    result.hit_rate = cached / prompt if prompt else 0.0


def run_once(policy: str, load: int, args: argparse.Namespace) -> RunResult:
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
    result = RunResult(policy, load)
    with SimCluster(
        router_args=args.router_args.split(),
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
        f"{args.tenants} tenants x {args.prefix_tokens}-token system prompts, "
        f"{args.output_tokens} output tokens, {args.duration:g} s wall per run, "
        f"time scale {args.time_scale:g} (figures in simulated time); "
        f"smg {args.router_args or '(defaults)'}"
    )
    header = f"{'load':>5} {'policy':<12} {'hit rate':>8} {'TTFT p50':>9} {'TTFT p90':>9}"
    header += f" {'req/s':>7} {'out tok/s':>9} {'done':>5} {'errors':>6}"
    print(header)
    for r in results:
        print(
            f"{r.load:>5} {r.policy:<12} {r.hit_rate:>8.1%} {r.ttft(0.5):>8.2f}s "
            f"{r.ttft(0.9):>8.2f}s {r.req_per_s:>7.2f} {r.tok_per_s:>9.1f} {r.completed:>5} "
            f"{r.errors:>6}"
        )
    for load in args.loads:
        rr = next(r for r in results if r.load == load and r.policy == "round_robin")
        ca = next(r for r in results if r.load == load and r.policy == "cache_aware")
        print(
            f"load {load}: cache_aware / round_robin: "
            f"throughput x{_ratio(ca.req_per_s, rr.req_per_s)}, "
            f"hit rate x{_ratio(ca.hit_rate, rr.hit_rate)}, "
            f"TTFT p50 x{_ratio(rr.ttft(0.5), ca.ttft(0.5))} lower"
        )


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "inf"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", type=int, default=4)
    parser.add_argument("--model", default="Qwen/Qwen3-32B")
    parser.add_argument("--gpu", default="L40S")
    parser.add_argument("--quantization", default="fp8")
    parser.add_argument("--tenants", type=int, default=16)
    parser.add_argument("--prefix-tokens", type=int, default=3000)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--loads", type=lambda s: [int(x) for x in s.split(",")], default=[8, 64])
    parser.add_argument("--duration", type=float, default=25.0, help="wall seconds per run")
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--router-args",
        default=" ".join(ROUTER_ARGS),
        help="extra smg flags for both policies (default: the classic cache-aware policy)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    results = []
    for load in args.loads:
        for policy in ("round_robin", "cache_aware"):
            result = run_once(policy, load, args)
            print(
                f"  {policy} at load {load}: {result.completed} requests, "
                f"hit rate {result.hit_rate:.1%}",
                flush=True,
            )
            results.append(result)
    print_table(results, args)


if __name__ == "__main__":
    main()
