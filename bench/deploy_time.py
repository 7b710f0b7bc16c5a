"""Time from ``POST /api/v1/deployments`` to status ``active`` on the local cluster (median of N).

Real parts: a scratch PostgreSQL database (created and dropped here), Redis, a Celery worker and
beat as subprocesses, simulated engines and the smg router as processes. Engine and reconcile
settings are the defaults ``make run`` uses (the simulator at real time, a 2 s reconcile interval
while an endpoint is settling), so the figure is what a person sees on this machine.

    .venv/bin/python bench/deploy_time.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PLINTH_ENV", "test")
os.environ.setdefault("PLINTH_TEST_DB_NAME", "bench_plinth_deploy")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
        "hardware": {"gpu": "H100-SXM"}}  # fmt: skip


def start(kind: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    argv = [
        str(Path(sys.executable).with_name("celery")),
        "-A",
        "controlplane",
        kind,
        "-l",
        "warning",
    ]
    queue = env["CELERY_QUEUE"]
    if kind == "worker":
        argv += ["--pool", "solo", "-Q", queue, "-n", f"{queue}@%h"]
    else:
        argv += ["-s", f"{log}.db"]
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()


def one_run(client: object, index: int, poll_s: float) -> float:
    from deployments.endpoints.models import Deployment

    body = json.dumps({"slug": f"bench-{index}", "name": "bench", "spec": SPEC})
    started = time.perf_counter()
    response = client.post("/api/v1/deployments", data=body, content_type="application/json")  # type: ignore[attr-defined]
    assert response.status_code == 201, response.content
    pk = response.json()["id"]
    while Deployment.objects.get(pk=pk).status != "active":
        if time.perf_counter() - started > 300:
            raise SystemExit(f"run {index}: not active after 300 s")
        time.sleep(poll_s)
    elapsed = time.perf_counter() - started
    client.delete(f"/api/v1/deployments/{pk}")  # type: ignore[attr-defined]
    while Deployment.objects.filter(pk=pk).exists():
        time.sleep(0.2)
    return elapsed


def wait_for_worker(queue: str) -> None:
    """Measure deploys, not the worker's own start-up."""
    from controlplane.celery import app

    deadline = time.monotonic() + 120
    while not app.control.ping(destination=[f"{queue}@{socket.gethostname()}"], timeout=1.0):
        if time.monotonic() > deadline:
            raise SystemExit("the Celery worker did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    import django

    django.setup()
    import redis
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_databases, teardown_databases

    from controlplane import services
    from controlplane.celery import app

    old = setup_databases(verbosity=0, interactive=False)
    workdir = Path(tempfile.mkdtemp(prefix="plinth-bench-"))
    db = settings.DATABASES["default"]
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = {**os.environ, "DATABASE_URL": url, "PLINTH_LOCAL_RUN_DIR": str(workdir / "local"),
           "PLINTH_DATA_DIR": str(workdir)}  # fmt: skip
    # A queue of its own, so no other worker on this Redis takes the benchmark's tasks.
    env["CELERY_QUEUE"] = queue = f"plinth-bench-{os.getpid()}"
    app.conf.task_default_queue = queue
    user = get_user_model().objects.create_user("bench", password="bench-password-123")
    org = services.create_organization(name="Bench", owner=user)
    key = services.create_api_key(services.actor_for_user(user, org.pk), name="bench",
                                  kind="management", role="developer").plaintext  # fmt: skip
    worker, beat = (
        start("worker", env, workdir / "worker.log"),
        start("beat", env, workdir / "beat.log"),
    )
    try:
        wait_for_worker(queue)
        client = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
        times = [one_run(client, i, poll_s=0.05) for i in range(args.runs)]
    finally:
        stop(beat)
        stop(worker)
        teardown_databases(old, verbosity=0)
        redis.Redis.from_url(settings.REDIS_URL).delete(queue)
    print("run  create->active (s)")
    for i, seconds in enumerate(times, 1):
        print(f"{i:>3}  {seconds:8.2f}")
    print(f"median of {len(times)}: {statistics.median(times):.2f} s "
          f"(reconcile interval {settings.PLINTH_RECONCILE_INTERVAL_S} s, sweep "
          f"{settings.PLINTH_SWEEP_INTERVAL_S} s, simulated engine at real time)")  # fmt: skip


if __name__ == "__main__":
    main()
