"""The whole control plane at 1,000 endpoints, next to the same run at 10 (issue 14 item 8).

Not a test. Each scale gets a throw-away database with one organization holding N endpoints
and N inference keys: ``--running`` of them (5) running on the local cluster (simulated engines
and the smg router, as processes), the rest alternately stopped and scaled to zero, all made
through the services as people would. Then a real Celery worker (prefork, concurrency 2, as
``make run``), beat and the gateway (``python -m gateway``) run against it with the default
intervals, and once every endpoint has settled the bench measures:

- worker and gateway CPU at idle, as a share of one core, over ``--idle-seconds``; the worker's
  figure is its Celery processes only (the engines it started are not counted); the deepest
  task queue seen meanwhile;
- reconcile passes and autoscaler passes per minute at idle (from the worker's log);
- change-to-reconciled p50/p99: a person scales a stopped endpoint, and the time until a pass
  has acted on it (``observed_generation`` reaches ``generation``), ``--changes`` times;
- the gateway's added latency: p50 of small non-streaming requests through the gateway minus
  p50 straight to the same endpoint's router, interleaved;
- API and console list p50 (``GET /api/v1/deployments``, the console's ``/endpoints/``, each
  unfiltered and ``status=active``) with their query counts.

Run (PostgreSQL and Redis from DATABASE_URL / REDIS_URL; a few minutes at 1,000):

    .venv/bin/python bench/control_plane.py --endpoints 1000
    .venv/bin/python bench/control_plane.py --endpoints 200 --idle-seconds 30   # development
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from process_cpu import cpu_seconds  # noqa: E402  (beside this script)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PLINTH_ENV", "test")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
QUEUE = f"plinth-bench-cp-{os.getpid()}"
os.environ["CELERY_QUEUE"] = QUEUE  # this process sends to the bench's worker only

RUNNING_SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 1, "max_replicas": 2},
}
# Simulated engines fast enough that the running endpoints come up in seconds.
FAST_ENGINES = {
    "PLINTH_SIM_TIME_SCALE": "200",
    "PLINTH_SIM_DRAIN_TIMEOUT": "2",
    "PLINTH_SIM_COLD_START": "0",  # the control plane's own figures, not the engines' start
}
RECONCILE, AUTOSCALE = "deployments.reconcile_deployment", "deployments.autoscale"


@dataclass
class Figures:
    endpoints: int
    worker_cpu: float = float("nan")  # share of one core
    gateway_cpu: float = float("nan")
    max_queue: int = 0
    reconciles_per_min: float = float("nan")
    autoscales_per_min: float = float("nan")
    change_s: list[float] = field(default_factory=list)
    gateway_added_ms: float = float("nan")
    lists: dict[str, tuple[float, int]] = field(default_factory=dict)  # name -> (p50 ms, queries)


# ---- processes ----------------------------------------------------------------------------


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def wait(check: Callable[[], Any], what: str, timeout: float, interval: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not within {timeout:.0f} s")
        time.sleep(interval)
    return value


# ---- data ---------------------------------------------------------------------------------


@dataclass
class Seeded:
    actor: Any
    user: Any
    management_key: str
    inference_key: str
    running: list[str]  # slugs
    stopped: list[str]


def seed(n: int, running: int) -> Seeded:
    """N endpoints and N inference keys in one organization, through the services."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from controlplane import services as platform
    from deployments.endpoints import services

    user = get_user_model().objects.create_user("bench", password="unused-bench-password")
    org = platform.create_organization(name="Bench", owner=user)
    actor = platform.actor_for_user(user, org.pk)
    management = platform.create_api_key(actor, name="m", kind="management", role="developer")
    keys = [platform.create_api_key(actor, name=f"k{i}", kind="inference") for i in range(n)]
    slugs_running, slugs_stopped = [], []
    for i in range(n):
        slug = f"ep-{i:04d}"
        with transaction.atomic():  # one commit (and one message) per endpoint
            made = services.create_deployment(actor, slug=slug, name=slug, spec=RUNNING_SPEC)
            if i < running:
                slugs_running.append(slug)
            elif i % 2:
                services.stop(actor, made.pk)
                slugs_stopped.append(slug)
            else:
                services.scale(actor, made.pk, replicas=0)
    return Seeded(
        actor, user, management.plaintext, keys[0].plaintext, slugs_running, slugs_stopped
    )


def settled(running: int) -> bool:
    """Every change acted on, and the running endpoints serving."""
    from django.db.models import F

    from deployments.endpoints.models import Deployment, DesiredState

    rows = Deployment.objects.all()
    if rows.filter(observed_generation__lt=F("generation")).exists():
        return False
    serving = rows.filter(desired_state=DesiredState.RUNNING, desired_replicas__gt=0)
    return sum(d.status == "active" for d in serving) == running


# ---- measurements -------------------------------------------------------------------------


def queue_depth(client: Any) -> int:
    lists = [QUEUE, *(f"{QUEUE}\x06\x16{step}" for step in (3, 6, 9))]
    return sum(client.llen(name) for name in lists)


def measure_idle(
    figures: Figures, worker: subprocess.Popen[bytes], gateway: subprocess.Popen[bytes],
    worker_log: Path, seconds: float, redis_client: Any,
) -> None:  # fmt: skip
    offset = worker_log.stat().st_size
    cpu_w, cpu_g = cpu_seconds(worker.pid, only="celery"), cpu_seconds(gateway.pid)
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        figures.max_queue = max(figures.max_queue, queue_depth(redis_client))
        time.sleep(1.0)
    elapsed = time.monotonic() - started
    figures.worker_cpu = (cpu_seconds(worker.pid, only="celery") - cpu_w) / elapsed
    figures.gateway_cpu = (cpu_seconds(gateway.pid) - cpu_g) / elapsed
    with worker_log.open("rb") as log:
        log.seek(offset)
        text = log.read().decode(errors="replace")
    minutes = elapsed / 60
    done = re.findall(r"Task ([\w.]+)\[[0-9a-f-]+\] succeeded", text)
    figures.reconciles_per_min = done.count(RECONCILE) / minutes
    figures.autoscales_per_min = done.count(AUTOSCALE) / minutes


def measure_changes(figures: Figures, seeded: Seeded, changes: int) -> None:
    """A person scales a stopped endpoint; seconds until a pass has acted on it."""
    from deployments.endpoints import services
    from deployments.endpoints.models import Deployment

    for i in range(changes):
        slug = seeded.stopped[i % len(seeded.stopped)]
        current = Deployment.objects.get(slug=slug).desired_replicas
        changed = services.scale(seeded.actor, slug, replicas=2 if current == 1 else 1)
        began = time.perf_counter()
        rows = Deployment.objects.filter(pk=changed.pk, observed_generation__gte=changed.generation)
        wait(rows.exists, f"change {i} reconciled", timeout=120, interval=0.01)
        figures.change_s.append(time.perf_counter() - began)
        time.sleep(0.5)


def measure_gateway(figures: Figures, seeded: Seeded, gateway_url: str, requests: int) -> None:
    """p50 through the gateway minus p50 straight to the endpoint's router, interleaved."""
    import httpx

    from controlplane.crypto import engine_api_key
    from deployments.endpoints.models import Deployment

    endpoint = Deployment.objects.get(slug=seeded.running[0])
    body = {"model": "chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    paths = {
        "gateway": (
            f"{gateway_url}/endpoints/{endpoint.slug}/v1/chat/completions",
            seeded.inference_key,
        ),
        "direct": (
            f"{endpoint.router_url.rstrip('/')}/v1/chat/completions",
            engine_api_key(str(endpoint.pk)),
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    with httpx.Client(timeout=30) as client:
        for i in range(requests + 10):
            for name, (url, key) in paths.items():
                began = time.perf_counter()
                answer = client.post(url, json=body, headers={"Authorization": f"Bearer {key}"})
                took = time.perf_counter() - began
                if answer.status_code != 200:
                    raise SystemExit(f"{name}: {answer.status_code} {answer.text[:200]}")
                if i >= 10:  # warm-up left out
                    times[name].append(took)
    added = statistics.median(times["gateway"]) - statistics.median(times["direct"])
    figures.gateway_added_ms = added * 1000


def measure_lists(figures: Figures, seeded: Seeded, samples: int) -> None:
    from django.db import connection
    from django.test import Client

    api = Client(HTTP_AUTHORIZATION=f"Bearer {seeded.management_key}")
    console = Client()
    console.force_login(seeded.user)
    pages = {
        "API list": (api, "/api/v1/deployments?limit=50"),
        "API list status=active": (api, "/api/v1/deployments?status=active"),
        "console list": (console, "/endpoints/"),
        "console list status=active": (console, "/endpoints/?status=active"),
    }
    for name, (client, url) in pages.items():
        client.get(url)  # warm (the key's last-used stamp, the session)
        captured: list[str] = []

        def count(execute: Any, sql: str, *rest: Any, seen: list[str] = captured) -> Any:
            seen.append(sql)
            return execute(sql, *rest)

        with connection.execute_wrapper(count):
            assert client.get(url).status_code == 200, url
        took = []
        for _ in range(samples):
            began = time.perf_counter()
            client.get(url)
            took.append(time.perf_counter() - began)
        figures.lists[name] = (statistics.median(took) * 1000, len(captured))


# ---- one scale ----------------------------------------------------------------------------


def run_scale(n: int, args: argparse.Namespace) -> Figures:
    import redis
    from django.conf import settings
    from django.db import connection

    from runtime.sim.launcher import free_port, http_get

    figures = Figures(endpoints=n)
    settings.DATABASES["default"]["TEST"]["NAME"] = f"bench_plinth_cp_{os.getpid()}"
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    workdir = Path(tempfile.mkdtemp(prefix="plinth-bench-cp-"))
    redis_client = redis.Redis.from_url(settings.REDIS_URL)
    db = settings.DATABASES["default"]
    env = {
        **os.environ, **FAST_ENGINES,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db_name}",
        "CELERY_QUEUE": QUEUE, "PLINTH_LOCAL_RUN_DIR": str(workdir / "local"),
        "PLINTH_DATA_DIR": str(workdir), "PYTHONPATH": str(ROOT), "LOG_LEVEL": "WARNING",
    }  # fmt: skip
    celery = [str(Path(sys.executable).with_name("celery")), "-A", "controlplane"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        began = time.monotonic()
        seeded = seed(n, args.running)
        print(f"  {n}: seeded in {time.monotonic() - began:.0f} s", flush=True)
        worker_log = workdir / "worker.log"
        worker = start(
            [*celery, "worker", "-l", "info", "--concurrency", "2", "-Q", QUEUE,
             "-n", f"{QUEUE}@%h", "--without-gossip", "--without-mingle"],
            env, worker_log,
        )  # fmt: skip
        procs.append(worker)
        procs.append(start([*celery, "beat", "-s", str(workdir / "beat-schedule")], env,
                           workdir / "beat.log"))  # fmt: skip
        port = free_port()
        gateway = start(
            [sys.executable, "-m", "gateway", "--port", str(port),
             "--metrics-port", str(free_port())],
            env, workdir / "gateway.log",
        )  # fmt: skip
        procs.append(gateway)
        gateway_url = f"http://127.0.0.1:{port}"
        wait(lambda: http_get(f"{gateway_url}/health")[0] == 200, "gateway up", 60)
        wait(lambda: settled(args.running), "every endpoint settled", args.settle_timeout, 1.0)
        print(f"  {n}: settled {time.monotonic() - began:.0f} s after the start", flush=True)
        time.sleep(5)  # the last notifications and passes of settling
        measure_idle(figures, worker, gateway, worker_log, args.idle_seconds, redis_client)
        measure_gateway(figures, seeded, gateway_url, args.requests)
        measure_changes(figures, seeded, args.changes)
        measure_lists(figures, seeded, args.list_samples)
    finally:
        for proc in reversed(procs):
            stop(proc)
        stop_local_processes(workdir / "local")
        connection.creation.destroy_test_db(db_name, verbosity=0)
        redis_client.delete(*[QUEUE, *(f"{QUEUE}\x06\x16{s}" for s in (3, 6, 9))])
        if not args.keep_logs:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"  logs: {workdir}")
    return figures


def stop_local_processes(run_dir: Path) -> None:
    from deployments.drivers.base import DeploymentRef
    from deployments.drivers.local.driver import LocalDriver, LocalOptions

    if not run_dir.is_dir():
        return
    driver = LocalDriver(LocalOptions(run_dir=run_dir, stop_grace_s=2))
    for child in run_dir.iterdir():
        if child.is_dir():
            ref = DeploymentRef(id=child.name, slug=child.name)
            wait(partial(driver.delete, ref), "local processes stopped", 60)


# ---- report -------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def print_table(small: Figures, large: Figures) -> None:
    rows: list[tuple[str, Callable[[Figures], str]]] = [
        ("worker CPU at idle (% of a core)", lambda f: f"{f.worker_cpu * 100:.1f}"),
        ("gateway CPU at idle (% of a core)", lambda f: f"{f.gateway_cpu * 100:.1f}"),
        ("task queue, deepest at idle", lambda f: f"{f.max_queue}"),
        ("reconcile passes / min at idle", lambda f: f"{f.reconciles_per_min:.0f}"),
        ("autoscaler passes / min", lambda f: f"{f.autoscales_per_min:.1f}"),
        ("change-to-reconciled p50 (s)", lambda f: f"{_pct(f.change_s, 0.5):.2f}"),
        ("change-to-reconciled p99 (s)", lambda f: f"{_pct(f.change_s, 0.99):.2f}"),
        ("gateway added latency p50 (ms)", lambda f: f"{f.gateway_added_ms:.2f}"),
    ]
    for name in small.lists:
        rows.append((f"{name} p50 ms (queries)", _list_cell(name)))
    width = max(len(name) for name, _ in rows)
    print(f"\n{'':<{width}}  {small.endpoints:>14}  {large.endpoints:>14}")
    for name, cell in rows:
        print(f"{name:<{width}}  {cell(small):>14}  {cell(large):>14}")


def _list_cell(name: str) -> Callable[[Figures], str]:
    def cell(f: Figures) -> str:
        p50, queries = f.lists[name]
        return f"{p50:.1f} ({queries})"

    return cell


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--baseline", type=int, default=10, help="the small scale compared with")
    parser.add_argument("--running", type=int, default=5, help="endpoints running engines")
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--changes", type=int, default=20)
    parser.add_argument("--requests", type=int, default=200, help="per path, gateway latency")
    parser.add_argument("--list-samples", type=int, default=20)
    parser.add_argument("--settle-timeout", type=float, default=900.0)
    parser.add_argument("--keep-logs", action="store_true")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    import django

    django.setup()
    results = []
    for n in (args.baseline, args.endpoints):
        print(f"scale {n}: {args.running} running, the rest stopped or scaled to zero", flush=True)
        results.append(run_scale(n, args))
    print_table(*results)
    print(
        f"\n{args.idle_seconds:.0f} s idle window; {args.changes} changes; "
        f"{args.requests} requests per path; run {uuid.uuid4().hex[:6]}"
    )


if __name__ == "__main__":
    main()
