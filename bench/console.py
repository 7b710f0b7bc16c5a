"""Server time and query count of every console page, at 10 endpoints and at 1,000 (issue 18
item 10: every page under 150 ms with 1,000 endpoints in the organization, query counts flat).

Not a test. Each scale gets a throw-away database with one organization holding N endpoints
and N inference keys, made through the services as people would (``bench/control_plane.py``'s
seeding), plus what the pages show: revisions and events of every endpoint, an hour of metric
samples and a log for the endpoint whose pages are opened, a day of usage for every endpoint,
a secret and members. No worker runs: the pages read the database, and the few messages the
services send go to a queue of this run's own, emptied at the end.

Each page is asked through Django's test client in this process (the full middleware stack,
no network): once to warm, once counting its SQL queries, then ``--samples`` times for the
p50 of its server time. The table puts the two scales side by side and marks a page over
150 ms at the large scale, or whose query count grew with N.

Run (PostgreSQL and Redis from DATABASE_URL / REDIS_URL; about a minute at 1,000):

    .venv/bin/python bench/console.py                   # 10 and 1,000
    .venv/bin/python bench/console.py --large 200       # development
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PLINTH_ENV", "test")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
from control_plane import seed  # noqa: E402  (beside this script)

# Set after that import, which names a queue of its own: the services' messages go to this
# run's queue, where no worker listens, and it is emptied at the end.
QUEUE = f"plinth-bench-console-{os.getpid()}"
os.environ["CELERY_QUEUE"] = QUEUE
RUN_DIR = Path(tempfile.mkdtemp(prefix="plinth-bench-console-"))
os.environ["PLINTH_LOCAL_RUN_DIR"] = str(RUN_DIR / "local")  # where the logs page reads

BUDGET_MS = 150.0
FOCUS = "ep-0000"  # the endpoint whose own pages are opened
# (name, path): every page a person opens, with the list's search and pages.
PAGES = [
    ("endpoints", "/endpoints/"),
    ("endpoints ?q=", "/endpoints/?q=ep-00"),
    ("endpoints ?status=", "/endpoints/?status=stopped"),
    ("endpoints page 2", "/endpoints/?page=2"),
    ("endpoint", f"/endpoints/{FOCUS}/"),
    ("status card", f"/endpoints/{FOCUS}/status/"),
    ("metrics", f"/endpoints/{FOCUS}/metrics/"),
    ("events", f"/endpoints/{FOCUS}/events/"),
    ("revisions", f"/endpoints/{FOCUS}/revisions/"),
    ("diff", f"/endpoints/{FOCUS}/revisions/diff/?a=1&b=2"),
    ("logs", f"/endpoints/{FOCUS}/logs/"),
    ("logs ?level=&q=", f"/endpoints/{FOCUS}/logs/?level=WARNING&q=slow"),
    ("settings", f"/endpoints/{FOCUS}/settings/"),
    ("delete", f"/endpoints/{FOCUS}/delete/"),
    ("wizard", "/endpoints/new/"),
    ("keys", "/keys/"),
    ("keys ?q=", "/keys/?q=k9"),
    ("keys page 2", "/keys/?page=2"),
    ("key endpoint search", "/keys/endpoints/?endpoint_q=ep-00"),
    ("usage", "/usage/"),
    ("members", "/members/"),
    ("secrets", "/secrets/"),
    ("clusters", "/clusters/"),
    ("audit", "/audit/"),
    ("quotas", "/quotas/"),
    ("optimize", "/optimize/"),
    ("invitations", "/invitations/"),
]


@dataclass
class Figures:
    endpoints: int
    seed_s: float = 0.0
    pages: dict[str, tuple[float, int, int]] = field(default_factory=dict)  # ms, queries, status


def enrich(seeded: Any, n: int) -> None:
    """What the pages show beyond endpoints and keys: revisions, samples, usage, a log."""
    from django.contrib.auth import get_user_model

    from controlplane import services as platform
    from controlplane.models import ApiKey, Role
    from deployments.endpoints import services
    from deployments.endpoints.models import Deployment
    from deployments.traffic.models import MetricSample, UsageRecord

    actor = seeded.actor
    focus = Deployment.objects.select_related("target_revision").get(slug=FOCUS)
    assert focus.target_revision is not None  # made by create_deployment
    spec = focus.target_revision.spec
    bigger = {**spec, "batching": {"max_running_requests": 64}}
    services.update_settings(actor, focus.pk, spec=bigger, base_revision=1, message="bigger")
    now = time_now()
    MetricSample.objects.bulk_create(
        MetricSample(
            deployment=focus, ts=now - timedelta(seconds=10 * i), requests_per_s=3 + i % 5,
            tokens_per_s=300 + i, ttft_p50=0.05, ttft_p90=0.09, itl_p50=0.01, itl_p90=0.02,
            running=4, queued=i % 3, kv_usage=0.4, cache_hit_rate=0.6, replicas_ready=1,
        )
        for i in range(360)
    )  # fmt: skip
    keys = list(ApiKey.objects.filter(kind="inference").order_by("created_at")[:20])
    minute = now.replace(second=0, microsecond=0)
    UsageRecord.objects.bulk_create(
        UsageRecord(
            organization=actor.organization, api_key=keys[i % len(keys)],
            deployment_id=d.pk, deployment_slug=d.slug, minute=minute - timedelta(hours=h),
            requests=5, prompt_tokens=500, cached_tokens=200, completion_tokens=900,
        )
        for i, d in enumerate(Deployment.objects.all())
        for h in range(0, 24, 4)
    )  # fmt: skip
    platform.set_secret(actor, name="hf-token", value="hf_bench", description="HF")
    users = get_user_model()
    for name in ("carol", "dave"):
        users.objects.create_user(name, password="unused-bench-password")
        platform.add_member(actor, username=name, role=Role.DEVELOPER)
    log_dir = RUN_DIR / "local" / str(focus.pk)
    log_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        f"[2026-01-01 12:{i // 60:02d}:{i % 60:02d}] "
        + ("WARNING: slow step" if i % 50 == 0 else f"INFO: Prefill batch {i}")
        for i in range(1000)
    ]
    (log_dir / "engine-0.log").write_text("\n".join(lines) + "\n")
    del n


def time_now() -> Any:
    from django.utils import timezone

    return timezone.now()


def measure(figures: Figures, user: Any, samples: int) -> None:
    from django.db import connection
    from django.test import Client

    client = Client()
    client.force_login(user)
    for name, path in PAGES:
        client.get(path)  # warm: the session, caches, template loading
        captured: list[str] = []

        def count(execute: Any, sql: str, *rest: Any, seen: list[str] = captured) -> Any:
            seen.append(sql)
            return execute(sql, *rest)

        with connection.execute_wrapper(count):
            status = client.get(path).status_code
        took = []
        for _ in range(samples):
            began = time.perf_counter()
            client.get(path)
            took.append(time.perf_counter() - began)
        figures.pages[name] = (statistics.median(took) * 1000, len(captured), status)


def run_scale(n: int, samples: int) -> Figures:
    import redis
    from django.conf import settings
    from django.db import connection

    figures = Figures(endpoints=n)
    settings.DATABASES["default"]["TEST"]["NAME"] = f"bench_plinth_console_{os.getpid()}"
    db_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        began = time.monotonic()
        seeded = seed(n, running=min(2, n))
        enrich(seeded, n)
        figures.seed_s = time.monotonic() - began
        seeded.user.is_staff = True  # the quotas page is an instance admin's
        seeded.user.save(update_fields=["is_staff"])
        print(f"  {n}: seeded in {figures.seed_s:.0f} s", flush=True)
        measure(figures, seeded.user, samples)
    finally:
        connection.creation.destroy_test_db(db_name, verbosity=0)
        client = redis.Redis.from_url(settings.REDIS_URL)
        client.delete(*[QUEUE, *(f"{QUEUE}\x06\x16{s}" for s in (3, 6, 9))])
    return figures


def print_table(small: Figures, large: Figures) -> None:
    head = (
        f"{'page':<20} {f'p50 ms @{small.endpoints}':>13} {f'queries @{small.endpoints}':>13} "
        f"{f'p50 ms @{large.endpoints}':>14} {f'queries @{large.endpoints}':>15}  verdict"
    )
    print(head)
    print("-" * len(head))
    worst = 0.0
    for name, _path in PAGES:
        s_ms, s_q, s_status = small.pages[name]
        l_ms, l_q, l_status = large.pages[name]
        worst = max(worst, l_ms)
        problems = []
        if l_ms > BUDGET_MS:
            problems.append(f"over {BUDGET_MS:.0f} ms")
        if l_q > s_q:
            problems.append("queries grow with N")
        if s_status != 200 or l_status != 200:
            problems.append(f"HTTP {s_status}/{l_status}")
        print(
            f"{name:<20} {s_ms:>13.1f} {s_q:>13} {l_ms:>14.1f} {l_q:>15}  "
            + (", ".join(problems) or "ok")
        )
    print(f"\nslowest page at {large.endpoints}: {worst:.1f} ms (budget {BUDGET_MS:.0f} ms)")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=10, help="endpoints at the small scale")
    parser.add_argument("--large", type=int, default=1000, help="endpoints at the large scale")
    parser.add_argument("--samples", type=int, default=7, help="timed requests per page")
    return parser.parse_args()


def main() -> None:
    import django

    args = parse_args()
    django.setup()
    from django.test.utils import setup_test_environment

    setup_test_environment()  # the test client's hosts and a fast, local e-mail backend
    try:
        print(f"console pages at {args.small} and {args.large} endpoints in one organization")
        small = run_scale(args.small, args.samples)
        large = run_scale(args.large, args.samples)
        print()
        print_table(small, large)
        print("server time: Django's test client in this process (middleware, views, templates,")
        print("PostgreSQL over loopback), the p50 of", args.samples, "requests per page")
    finally:
        shutil.rmtree(RUN_DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
