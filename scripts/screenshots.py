"""Screenshots of the console's main pages at desktop (1280 px) and phone (390 px) widths, for
the README (``docs/screenshots/``).

Not a test. Makes a throw-away database (from DATABASE_URL, removed at the end), seeds one
organization through the services (a few endpoints, two of them running on the local cluster
as simulated engines, revisions, keys, a secret, members, usage and an hour of metric
samples), starts the console (uvicorn) and a Celery worker with beat as real processes, waits
until the running endpoints are Active, then drives Debian's Chromium with Playwright through
the pages and saves one PNG per page and width (the first screen, not the whole page, so each
stays small). The metric and usage history is seeded (the engines have had no traffic); the
statuses, events and logs are real.

Run (PostgreSQL and Redis from DATABASE_URL / REDIS_URL, as the tests use them):

    .venv/bin/python scripts/screenshots.py             # writes docs/screenshots/*.png
    .venv/bin/python scripts/screenshots.py --out /tmp/shots
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PLINTH_ENV", "test")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# This run's own task queue: the seeding's messages and the worker below meet there, and no
# other worker on this Redis takes them.
QUEUE = f"plinth-screenshots-{os.getpid()}"
os.environ["CELERY_QUEUE"] = QUEUE

CHROMIUM = "/usr/bin/chromium"
PASSWORD = "screenshots-only-password"
WIDTHS = {"desktop": (1280, 860), "phone": (390, 844)}
SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
    "hardware": {"gpu": "H100-SXM"},
}
# (file name, path): the pages the README shows, in a person's order.
PAGES = [
    ("endpoints", "/endpoints/"),
    ("endpoint", "/endpoints/chat/"),
    ("stop-dialog", "/endpoints/chat/"),  # the confirmation that Stop opens (console.js)
    ("metrics", "/endpoints/chat/metrics/"),
    ("logs", "/endpoints/chat/logs/?timestamps=1"),
    ("revisions", "/endpoints/chat/revisions/"),
    ("new-endpoint", "/endpoints/new/"),
    ("usage", "/usage/"),
    ("keys", "/keys/"),
]
COME_UP_S = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- data ----------------------------------------------------------------------------------


def seed() -> None:
    """One organization as a small team would have it, made through the services."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from controlplane import services as platform
    from controlplane.models import Role
    from deployments.endpoints import services
    from deployments.traffic.models import MetricSample, UsageRecord

    users = get_user_model()
    alice = users.objects.create_user("alice", password=PASSWORD)
    org = platform.create_organization(name="Acme", owner=alice)
    actor = platform.actor_for_user(alice, org.pk)
    for name in ("bob", "carol"):
        users.objects.create_user(name, password=PASSWORD)
        platform.add_member(actor, username=name, role=Role.DEVELOPER)
    platform.set_secret(actor, name="hf-token", value="hf_example", description="Hugging Face")
    chat = services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC)
    bigger = {**SPEC, "batching": {"max_running_requests": 64}}
    services.update_settings(actor, chat.pk, spec=bigger, base_revision=1, message="bigger batches")
    services.create_deployment(
        actor, slug="code-assist", name="Code assist",
        spec={**SPEC, "model": {"source": "Qwen/Qwen3-8B", "served_name": "code"}},
    )  # fmt: skip
    stopped = [
        ("summarize", "Summarize", "meta-llama/Llama-3.1-70B-Instruct", "H100-SXM", 4),
        ("embed-batch", "Embed batch", "Qwen/Qwen3-32B", "L40S", 2),
        ("support-bot", "Support bot", "meta-llama/Llama-3.1-8B-Instruct", "A100-80GB", 1),
    ]
    for slug, name, model, gpu, tp in stopped:
        spec = {"model": {"source": model}, "hardware": {"gpu": gpu}, "parallelism": {"tp": tp}}
        made = services.create_deployment(actor, slug=slug, name=name, spec=spec)
        services.stop(actor, made.pk)
    keys = [
        platform.create_api_key(actor, name=name, kind="inference").api_key
        for name in ("backend-prod", "batch-jobs")
    ]
    platform.create_api_key(actor, name="ci", kind="management", role=Role.DEVELOPER)
    now = timezone.now()
    MetricSample.objects.bulk_create(_sample(chat, now, i) for i in range(1, 120))
    minute = now.replace(second=0, microsecond=0)
    UsageRecord.objects.bulk_create(
        UsageRecord(
            organization=org, api_key=keys[h % 2], deployment_id=chat.pk, deployment_slug="chat",
            minute=minute - timedelta(hours=h), requests=40 + 7 * (h % 5),
            prompt_tokens=52_000 + 900 * h, cached_tokens=21_000, completion_tokens=18_000,
        )
        for h in range(24)
    )  # fmt: skip


def _sample(deployment: Any, now: datetime, i: int) -> Any:
    """An invented but plausible sample ``i`` half-minutes ago: traffic in slow waves."""
    from deployments.traffic.models import MetricSample

    wave = math.sin(i / 14) + 0.3 * math.sin(i / 3.1)
    load = 5 + 2.2 * wave
    return MetricSample(
        deployment=deployment, ts=now - timedelta(seconds=30 * i), requests_per_s=load,
        tokens_per_s=185 * load, ttft_p50=0.05 + 0.006 * load, ttft_p90=0.09 + 0.012 * load,
        itl_p50=0.010 + 0.0004 * load, itl_p90=0.014 + 0.0008 * load, running=round(1.4 * load),
        queued=max(0, round(load - 6)), kv_usage=0.2 + 0.04 * load,
        cache_hit_rate=0.58 + 0.05 * math.sin(i / 20), replicas_ready=1,
    )  # fmt: skip


def active(slugs: tuple[str, ...]) -> bool:
    from deployments.endpoints.models import Deployment

    return all(d.status == "active" for d in Deployment.objects.filter(slug__in=slugs))


# ---- processes -----------------------------------------------------------------------------


@contextmanager
def console(db_name: str, work: Path) -> Iterator[str]:
    """uvicorn and a Celery worker (with beat) against ``db_name``; yields the console's URL."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_ALLOW")}
    env.update(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db_name}",
        PLINTH_DEBUG="false", PLINTH_DATA_DIR=str(work / "data"),
        PLINTH_LOCAL_RUN_DIR=str(work / "local"), PLINTH_SIM_TIME_SCALE="50",
        PLINTH_SWEEP_INTERVAL_S="1", PLINTH_RECONCILE_INTERVAL_S="1", PLINTH_PROBE_INTERVAL_S="2",
        PLINTH_LOCAL_STOP_GRACE_S="2", PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S="1",
        CELERY_QUEUE=QUEUE, PYTHONUNBUFFERED="1",
    )  # fmt: skip
    (work / "data").mkdir(parents=True, exist_ok=True)
    port = free_port()
    bin_dir = Path(sys.executable).parent
    web = subprocess.Popen(
        [str(bin_dir / "uvicorn"), "controlplane.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log"],
        cwd=ROOT, env=env, stdout=(work / "web.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    worker = subprocess.Popen(
        [str(bin_dir / "celery"), "-A", "controlplane", "worker", "--pool=solo", "--beat",
         "--without-heartbeat", "--without-gossip", "--without-mingle", "-Q",
         QUEUE, "-s", str(work / "beat-schedule"), "-l", "warning"],
        cwd=ROOT, env=env, stdout=(work / "worker.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                # A loopback http URL this script made, not input: S310 guards against file:.
                with urllib.request.urlopen(f"{url}/healthz", timeout=1):  # noqa: S310
                    break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        for proc in (worker, web):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        stop_local_processes(work / "local")


def stop_local_processes(run_dir: Path) -> None:
    """Engines and routers outlive the worker by design: stop those this run started."""
    from deployments.drivers.local.processes import ProcessTable

    if not run_dir.is_dir():
        return
    for signal_number in (15, 9):
        for endpoint_dir in run_dir.iterdir():
            for record in ProcessTable(endpoint_dir).records():
                record.signal(signal_number)
        time.sleep(0.5)


# ---- pictures ------------------------------------------------------------------------------


def shoot(url: str, out: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    saved = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--disable-gpu", "--disable-quic", "--no-sandbox"]
        )
        for label, (width, height) in WIDTHS.items():
            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            page.goto(f"{url}/login/")
            page.fill("#id_username", "alice")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(f"{url}/endpoints/")
            for name, path in PAGES:
                page.goto(url + path)
                page.wait_for_load_state("networkidle")
                if name == "stop-dialog":
                    page.get_by_role("button", name="Stop", exact=True).click()
                    page.locator("dialog#confirm-dialog").wait_for(state="visible")
                target = out / f"{name}-{label}.png"
                page.screenshot(path=target, animations="disabled")
                saved.append(target)
            context.close()
        browser.close()
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    args = parser.parse_args()

    import django

    django.setup()
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # Playwright's loop shares this thread
    from django.conf import settings
    from django.db import connection

    settings.DATABASES["default"]["TEST"]["NAME"] = f"plinth_screenshots_{os.getpid()}"
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    work = Path(tempfile.mkdtemp(prefix="plinth-screenshots-"))
    try:
        seed()
        with console(db_name, work) as url:
            deadline = time.monotonic() + COME_UP_S
            while not active(("chat", "code-assist")):
                if time.monotonic() > deadline:
                    raise SystemExit(f"the endpoints did not come up; logs in {work}")
                time.sleep(1)
            args.out.mkdir(parents=True, exist_ok=True)
            for path in shoot(url, args.out):
                print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: "
                      f"{path.stat().st_size // 1024} KB")  # fmt: skip
    finally:
        connection.creation.destroy_test_db(db_name, verbosity=0)
        shutil.rmtree(work, ignore_errors=True)
        import redis

        redis.Redis.from_url(settings.REDIS_URL).delete(
            QUEUE, *(f"{QUEUE}\x06\x16{step}" for step in (3, 6, 9))
        )


if __name__ == "__main__":
    main()
