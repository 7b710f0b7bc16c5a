"""Gateway overhead: direct to the router vs through Plinth's gateway, nginx and LiteLLM's proxy.

Not a test. One run starts two simulated engines behind the real smg router, Plinth's gateway
(``python -m gateway``, on a throw-away database with one endpoint and one rate-limited
inference key, so every request pays for authentication, the RPM/TPM check and metering),
nginx as a reference hop (a C proxy with no checks at all: what one more process on the path
costs here) and LiteLLM's proxy (master key set, so it checks keys too), all forwarding to the
same router. Each proxy runs as one worker process.

For streaming and not, at concurrency 1, 32 and 256, closed-loop clients rotate over the
targets request by request, so every path sees the same engine state and machine load at the
same moments (one target after another does not: on two busy cores the drift between cells is
larger than the gateway's own cost). LiteLLM is measured in a round of its own with direct
requests, since its CPU use would slow everything else in a shared round. Each "added"
figure is against the direct requests of its own round. Printed per cell: latency p50/p99,
added latency, requests/s, and the proxy's CPU seconds per 1,000 requests.

Two choices make the figures describe the gateway rather than the simulator: the engines run
at the lowest CPU priority (they stand in for GPU servers on other machines; here they would
otherwise take the cores the proxies need), and each client pauses a random 0-10 ms before a
request (``--jitter-ms``), so clients do not fall into step with the engine's batch clock.

Run: ``python bench/gateway.py`` (about five minutes; PostgreSQL and Redis from DATABASE_URL /
REDIS_URL). LiteLLM is looked for in ``$LITELLM_BIN``, next to this Python, on PATH, then in
``/work/litellm-venv`` (installed apart: its proxy extras pin packages Plinth uses); nginx on
PATH (Debian's ``nginx-light``). A missing peer's rows are left out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from load import closed_loop, send  # noqa: E402  (beside this script)
from process_cpu import cpu_seconds  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PLINTH_ENV", "test")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Reconcile tasks queued by creating the endpoint go nowhere: the bench stands in for reconcile.
os.environ["CELERY_QUEUE"] = "bench-gateway-unconsumed"

from runtime.sim.launcher import SimCluster, free_port, http_get  # noqa: E402

MODEL = "sim/llama-test"
MASTER_KEY = "sk-bench-master-key"
SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
# Far above what the bench sends: every request pays for the checks, none is refused.
LIMITS = {"requests_per_minute": 10**7, "tokens_per_minute": 10**9}


@dataclass
class Target:
    name: str
    base_url: str  # ends in /v1
    api_key: str
    pid: int | None  # the proxy process whose CPU is counted; None for direct


@dataclass
class Cell:
    target: str
    stream: bool
    concurrency: int
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    inside_p50: float = float("nan")  # the gateway's own view (histogram bucket bounds), ms
    inside_p99: float = float("nan")
    base: Cell | None = None  # the direct requests of the same round

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.wall if self.wall else 0.0

    @property
    def cpu_per_1000(self) -> float:
        return self.cpu / len(self.latencies) * 1000 if self.latencies else 0.0


# ---- processes ----------------------------------------------------------------------------


def wait_http(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while http_get(url)[0] != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start; see its log")
        time.sleep(0.2)


def start_gateway(db_name: str, log_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    from django.conf import settings

    db = settings.DATABASES["default"]
    env = dict(os.environ, LOG_LEVEL="WARNING", PYTHONPATH=str(ROOT))
    env["DATABASE_URL"] = (
        f"postgres://{db.get('USER') or 'postgres'}@{db.get('HOST') or '127.0.0.1'}:"
        f"{db.get('PORT') or 5432}/{db_name}"
    )
    port = free_port()
    os.environ["BENCH_GATEWAY_METRICS"] = f"http://127.0.0.1:{free_port()}/metrics"
    metrics_port = os.environ["BENCH_GATEWAY_METRICS"].rsplit(":", 1)[1].split("/")[0]
    argv = [sys.executable, "-m", "gateway", "--port", str(port), "--metrics-port", metrics_port]
    # The access log goes to a file, as a deployment would ship it; it is part of the cost.
    with (log_dir / "gateway.log").open("wb") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/health", proc, "Plinth's gateway")
    return proc, f"http://127.0.0.1:{port}"


def litellm_binary() -> str | None:
    for candidate in (
        os.environ.get("LITELLM_BIN"),
        str(Path(sys.executable).with_name("litellm")),
        shutil.which("litellm"),
        "/work/litellm-venv/bin/litellm",
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def start_litellm(
    binary: str, router_url: str, log_dir: Path
) -> tuple[subprocess.Popen[bytes], str]:
    config = log_dir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: openai/{MODEL}\n"
        f"      api_base: {router_url}/v1\n"
        "      api_key: unused\n"
        "general_settings:\n"
        f"  master_key: {MASTER_KEY}\n"
        "litellm_settings:\n"
        "  drop_params: true\n"
        "  telemetry: false\n"
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(LITELLM_LOG="ERROR", LITELLM_TELEMETRY="False", NO_DOCS="True")
    argv = [binary, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--num_workers", "1", "--telemetry", "False"]
    with (log_dir / "litellm.log").open("wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/health/liveliness", proc, "LiteLLM", timeout=180)
    return proc, f"http://127.0.0.1:{port}"


def start_nginx(binary: str, router_url: str, log_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """nginx as a plain reverse proxy: keep-alive upstream connections, no buffering."""
    port = free_port()
    config = log_dir / "nginx.conf"
    config.write_text(
        "worker_processes 1;\n"
        f"pid {log_dir / 'nginx.pid'};\n"
        f"error_log {log_dir / 'nginx-error.log'} warn;\n"
        "events { worker_connections 4096; }\n"
        "http {\n"
        "  access_log off;\n"
        f"  client_body_temp_path {log_dir};\n"
        f"  upstream router {{ server {router_url.removeprefix('http://')}; keepalive 512; }}\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n"
        "    location / {\n      proxy_pass http://router;\n      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n      proxy_buffering off;\n    }\n  }\n}\n'
    )
    argv = [binary, "-c", str(config), "-g", "daemon off;", "-e", str(log_dir / "nginx-error.log")]
    with (log_dir / "nginx.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{port}/health", proc, "nginx")
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


# ---- data ---------------------------------------------------------------------------------


def create_database() -> tuple[str, str]:
    """A fresh database (migrated) with one endpoint ``bench`` and its key. Returns (name, key)."""
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    settings.DATABASES["default"]["TEST"]["NAME"] = "bench_plinth_gateway"
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    return name, _create_endpoint_and_key()


def _create_endpoint_and_key() -> str:
    from django.contrib.auth import get_user_model

    from controlplane import services as platform
    from deployments.endpoints import services as deployment_services

    user = get_user_model().objects.create_user("bench", password="unused-bench-password")
    org = platform.create_organization(name="Bench", owner=user)
    actor = platform.actor_for_user(user, org.pk)
    deployment_services.create_deployment(actor, slug="bench", name="bench", spec=SPEC)
    limits = {} if os.environ.get("BENCH_UNLIMITED_KEY") else LIMITS
    created = platform.create_api_key(actor, name="bench", kind="inference", **limits)
    return created.plaintext


def mark_serving(router_url: str) -> None:
    """Record what reconcile would observe once replicas are ready (no driver in the bench)."""
    from django.utils import timezone

    from controlplane import notify
    from deployments.endpoints.models import Deployment

    deployment = Deployment.objects.get(slug="bench")
    Deployment.objects.filter(pk=deployment.pk).update(
        applied_revision=deployment.target_revision,
        current_revision=deployment.target_revision,
        ready_replicas=2,
        total_replicas=2,
        router_url=router_url,
        first_ready_at=timezone.now(),
    )
    notify.publish_on_commit("deployment", str(deployment.pk))


def drop_database(name: str) -> None:
    from django.db import connection

    connection.creation.destroy_test_db(name, verbosity=0)


# ---- load ---------------------------------------------------------------------------------


def request_body(stream: bool, max_tokens: int) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Summarise the quarterly report in one line."}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": stream,
    }


async def one_request(
    session: aiohttp.ClientSession,
    target: Target,
    body: dict[str, object],
    cell: Cell,
    jitter: float,
) -> None:
    # The pause is not timed: it keeps clients from falling into step with the engine's steps.
    await asyncio.sleep(random.uniform(0.0, jitter))
    headers = {"Authorization": f"Bearer {target.api_key}"}
    answer = await send(session, f"{target.base_url}/chat/completions", body, headers)
    if answer.status != 200:
        cell.errors += 1
        return
    cell.latencies.append(answer.latency)


async def run_round(
    targets: list[Target], stream: bool, concurrency: int, args: argparse.Namespace
) -> list[Cell]:
    """``concurrency`` closed-loop clients, each taking every target in turn, for ``seconds``
    (then the requests in flight finish). Returns a cell per target; CPU is per process tree."""
    cells = [Cell(target.name, stream, concurrency) for target in targets]
    body = request_body(stream, args.max_tokens)
    connector = aiohttp.TCPConnector(limit=len(targets) * concurrency)
    timeout = aiohttp.ClientTimeout(total=300)
    jitter = args.jitter_ms / 1000
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client() -> None:
            # Every target once per cycle, in a fresh random order: a fixed order would give
            # each target a fixed place after the others, and a bias of its own.
            for turn in random.sample(range(len(targets)), len(targets)):
                await one_request(session, targets[turn], body, cells[turn], jitter)

        cpu_before = [cpu_seconds(target.pid) for target in targets]
        wall = await closed_loop(concurrency, args.seconds, client)
        for cell, target, before in zip(cells, targets, cpu_before, strict=True):
            cell.wall = wall
            cell.cpu = cpu_seconds(target.pid) - before
            cell.base = cells[0]
    return cells


# ---- report -------------------------------------------------------------------------------


def gateway_histogram() -> list[tuple[float, float]]:
    """(upper bound, cumulative count) of the gateway's own added-latency histogram."""
    status, body = http_get(os.environ["BENCH_GATEWAY_METRICS"])
    totals: dict[float, float] = {}
    for line in body.decode().splitlines() if status == 200 else []:
        if line.startswith("plinth_gateway_added_latency_seconds_bucket"):
            bound = float(line.split('le="', 1)[1].split('"', 1)[0])
            totals[bound] = totals.get(bound, 0.0) + float(line.rsplit(" ", 1)[1])
    return sorted(totals.items())


def histogram_quantile(
    before: list[tuple[float, float]], after: list[tuple[float, float]], q: float
) -> float:
    """Upper bucket bound (ms) under which a ``q`` share of the cell's requests fell."""
    earlier = dict(before)
    cell = [(bound, count - earlier.get(bound, 0.0)) for bound, count in after]
    total = cell[-1][1] if cell else 0.0
    if not total:
        return float("nan")
    return next(bound for bound, count in cell if count >= q * total) * 1000


def print_table(cells: list[Cell]) -> None:
    header = (
        f"{'mode':<8}{'conc':>5}  {'target':<8}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'+p50 ms':>9}{'+p99 ms':>9}{'req/s':>8}{'CPU s/1k':>10}{'errors':>7}"
        f"{'in-gw p50':>11}{'in-gw p99':>11}"
    )
    print(header)
    print("-" * len(header))
    for cell in cells:
        base = cell.base if cell.base is not cell else None
        added = "" if base is None else f"{cell.pct(0.5) - base.pct(0.5):9.2f}"
        added99 = "" if base is None else f"{cell.pct(0.99) - base.pct(0.99):9.2f}"
        cpu = "" if base is None else f"{cell.cpu_per_1000:10.2f}"
        print(
            f"{'stream' if cell.stream else 'unary':<8}{cell.concurrency:>5}  {cell.target:<8}"
            f"{cell.pct(0.5):9.2f}{cell.pct(0.99):9.2f}{added:>9}{added99:>9}"
            f"{cell.rps:8.0f}{cpu:>10}{cell.errors:>7}{_ms(cell.inside_p50)}{_ms(cell.inside_p99)}"
        )


def _ms(value: float) -> str:
    return f"{'<= ' + format(value, 'g'):>11}" if value == value else " " * 11


async def measure(
    shared: list[Target], apart: list[Target], args: argparse.Namespace
) -> list[Cell]:
    """A round of ``shared`` targets per mode and concurrency, then one per ``apart`` target
    with direct requests; ``shared[0]`` is direct, ``shared[1]`` Plinth."""
    direct = shared[0]
    for target in shared + apart:  # warm connections and caches of every path alike
        await run_round(
            [direct, target], False, 8, argparse.Namespace(**{**vars(args), "seconds": 1.0})
        )
    cells: list[Cell] = []
    for stream in (False, True):
        for concurrency in args.concurrency:
            before = gateway_histogram()
            cells_a = await run_round(shared, stream, concurrency, args)
            after = gateway_histogram()
            cells_a[1].inside_p50 = histogram_quantile(before, after, 0.5)
            cells_a[1].inside_p99 = histogram_quantile(before, after, 0.99)
            cells.extend(cells_a)
            for target in apart:
                cells.append((await run_round([direct, target], stream, concurrency, args))[1])
            print(f"  stream={stream!s:<5} c={concurrency:<4} done", flush=True)
    return cells


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--seconds", type=float, default=15.0, help="sending time per round")
    parser.add_argument("--max-tokens", type=int, default=16)
    # 2: engines run at half the modelled GPU's real time (16 tokens of Llama-3.1-8B on an
    # H100 in ~40 ms), so requests take as long as real ones, roughly, and concurrency 32 does
    # not saturate this machine's CPUs with the engines alone.
    parser.add_argument("--time-scale", type=float, default=2.0)
    parser.add_argument("--jitter-ms", type=float, default=10.0, help="random pause per request")
    parser.add_argument("--engine-nice", type=int, default=19, help="the engines' nice value")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--no-nginx", action="store_true")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix="plinth-bench-gateway-"))
    db_name, key = create_database()
    gateway = litellm = nginx = None
    try:
        with SimCluster(engines=2, time_scale=args.time_scale, log_dir=log_dir) as cluster:
            for engine in cluster.engines:
                os.setpriority(os.PRIO_PROCESS, engine.popen.pid, args.engine_nice)
            mark_serving(cluster.url)
            gateway, gateway_url = start_gateway(db_name, log_dir)
            shared = [
                Target("direct", f"{cluster.url}/v1", "unused", None),
                Target("plinth", f"{gateway_url}/endpoints/bench/v1", key, gateway.pid),
            ]
            apart: list[Target] = []
            nginx_bin = None if args.no_nginx else shutil.which("nginx")
            if nginx_bin:
                nginx, nginx_url = start_nginx(nginx_bin, cluster.url, log_dir)
                shared.append(Target("nginx", f"{nginx_url}/v1", "unused", nginx.pid))
            else:
                print("nginx not found: its rows are left out", file=sys.stderr)
            binary = None if args.no_litellm else litellm_binary()
            if binary:
                litellm, litellm_url = start_litellm(binary, cluster.url, log_dir)
                apart.append(Target("litellm", f"{litellm_url}/v1", MASTER_KEY, litellm.pid))
            else:
                print("LiteLLM not found: its rows are left out", file=sys.stderr)
            print(
                f"logs in {log_dir}; {os.cpu_count()} CPUs; one worker process per proxy",
                flush=True,
            )
            cells = asyncio.run(measure(shared, apart, args))
            print()
            print_table(cells)
            print(
                "+p50/+p99: over the direct requests of the same round (LiteLLM's round is its"
                " own). in-gw: the gateway's own added time (auth, limits, body checks before"
                " forwarding, plus relaying the response head), as histogram bucket bounds."
            )
    finally:
        stop(litellm)
        stop(nginx)
        stop(gateway)
        drop_database(db_name)


if __name__ == "__main__":
    main()
