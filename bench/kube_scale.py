"""The Kubernetes driver at 1,000 endpoints on one emulated cluster (or a real one: ``real``): API
requests at steady state, the time for a change to reach the API, and the worker's memory, for
four ways of running the same settled endpoints (the fourth also against a real API server),
side by side in one run (each mode in a process of its own, against an emulator or a control
plane of its own, so each memory figure is that mode's alone):

- ``old``: every object read, applied when changed and pruned on every pass (before set hashes);
- ``hash``: the set-hash skip, no caches (one GET of the anchor per settled pass);
- ``informer``: a ``KubeDriver`` on a ``ClusterCache`` built by hand;
- ``worker``: the production path. A throw-away database holds N endpoints on a cluster whose
  kubeconfig points at the emulator; this process turns the worker's caches on exactly as a
  Celery worker does as it starts (``registry.watch_clusters`` with the worker's own
  ``make_due_from_watch``), and every pass is ``reconcile.reconcile`` through
  ``registry.driver_for``. Changes are ``services.scale`` (1 -> 2 replicas) followed at once by
  the pass a worker would run (the queue in front of it is not in the figure). It also reports
  how long a change made on the cluster (a pod turning unready) takes to make its endpoint due;
- ``real``: ``worker`` against a real API server: the control plane of tests/kube_real (etcd,
  kube-apiserver, controller manager, scheduler, kwok making the pods Running and Ready on fake
  GPU nodes sized for N endpoints), started here, the worker with its own ServiceAccount token.
  Requests are the API server's own counts (``apiserver_request_total`` on its /metrics, by verb
  and resource, read by the admin before and after each window); the settled passes' share is
  their window's requests less the same rate as a window of no passes (the controllers' and
  kwok's own requests, which it reports as "server total"). The cluster change is an engine
  pod deleted (its ReplicaSet makes another).

The API emulator (tests/drivers/kube_emulator.py: kmock plus list/watch with resourceVersion)
runs in a child process. Requests per second at steady state are the API requests of a settled
pass, times N endpoints, at one pass per endpoint every ``--interval`` seconds
(``PLINTH_SETTLED_RECONCILE_S``, 10 s), plus the watches the caches re-open (one per kind every
300 s). A change's time is from the start of the pass until it returns, every changed object
written.

    .venv/bin/python bench/kube_scale.py                      # all four modes, side by side
    .venv/bin/python bench/kube_scale.py --modes worker,hash  # some of them
    .venv/bin/python bench/kube_scale.py --endpoints 200      # development
    .venv/bin/python bench/kube_scale.py --modes worker,real  # emulator and real server

``worker`` and ``real`` need PostgreSQL and Redis (DATABASE_URL / REDIS_URL); each makes and
drops a database. ``real`` needs the binaries scripts/kube_binaries.sh builds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import timedelta
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

MODES = ("old", "hash", "informer", "worker", "real")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deployments.drivers.base import DeploymentRef  # noqa: E402
from deployments.drivers.kube import labels as L  # noqa: E402
from deployments.drivers.kube.client import KubeClient  # noqa: E402
from deployments.drivers.kube.driver import KubeDriver  # noqa: E402
from deployments.drivers.kube.informer import ClusterCache  # noqa: E402
from tests.drivers.reference_specs import ENGINE_KEY, load_spec, revision_plan  # noqa: E402

NS = "bench"
# The kinds a ClusterCache watches; each re-opens its watch every WATCH_S seconds.
WATCH_S = 300


def serve(conn: Connection) -> None:
    """The emulator's process: answers ``count``, ``pods`` and ``stop`` over ``conn``."""
    from tests.drivers.kube_emulator import running_emulator

    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    with running_emulator() as emulator:
        conn.send(emulator.url)
        while True:
            command, arg = conn.recv()
            if command == "count":
                requests = list(emulator.emulator._requests)
                kinds = Counter(
                    "WATCH" if r.params.get("watch") == "true" else r.method.value for r in requests
                )
                conn.send((len(requests), dict(kinds)))
            elif command == "pods":
                for pod_args in arg:
                    emulator.put("v1", "Pod", NS, ready_pod(*pod_args))
                conn.send(None)
            else:
                conn.send(None)
                return


def ready_pod(ref_id: str, slug: str, role: str = "engine", ready: bool = True) -> dict[str, Any]:
    container = {
        "name": role,
        "ready": ready,
        "started": True,
        "restartCount": 0,
        "state": {"running": {}},
    }
    return {
        "metadata": {
            "name": f"{slug}-{role}-0",
            "namespace": NS,
            "labels": L.object_labels(slug, ref_id, 1, role),
        },
        "spec": {"containers": [{"name": role, "image": "x", "ports": [{"containerPort": 30000}]}]},
        "status": {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [container]},
    }


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Emulator:
    """The API emulator in a child process, and the requests it received."""

    def __init__(self) -> None:
        self.conn, child = multiprocessing.Pipe()
        ctx = multiprocessing.get_context("fork")
        self.process = ctx.Process(target=serve, args=(child,), daemon=True)
        self.process.start()
        self.url: str = self.conn.recv()

    def count(self) -> tuple[int, dict[str, int]]:
        self.conn.send(("count", None))
        result: tuple[int, dict[str, int]] = self.conn.recv()
        return result

    def pods(self, pods: list[tuple[str, str, str, bool]]) -> None:
        """(endpoint id, slug, role, ready) of each pod to put, as its kubelet would."""
        for at in range(0, len(pods), 500):
            self.conn.send(("pods", pods[at : at + 500]))
            self.conn.recv()

    def stop(self) -> None:
        self.conn.send(("stop", None))
        self.conn.recv()
        self.process.join(10)

    # --- what ``worker`` asks of the cluster it runs against ---

    def kubeconfig(self, settings: Any) -> str:
        from tests.fixtures.endpoints import kubeconfig

        settings.PLINTH_KUBE_ALLOW_HTTP = True  # the emulator speaks plain http on loopback
        settings.PLINTH_KUBE_ALLOW_HOSTS = ["127.0.0.1"]
        return kubeconfig(self.url).replace("team-a", NS)

    def run_pods(self, pods: list[tuple[str, str, str, bool]], cache: ClusterCache) -> None:
        """The endpoints' pods Running and Ready, as the cache sees them."""
        self.pods(pods)
        settled_cache(cache, len(pods))

    def change_a_pod(self, deployment_id: str, slug: str) -> None:
        self.pods([(deployment_id, slug, "engine", False)])

    def background(self, window_s: float) -> dict[str, float]:
        return {}  # nothing but this process asks the emulator anything


class RealServer:
    """The real control plane of tests/kube_real, its kwok nodes sized for ``endpoints``, the
    namespace ``NS`` and the worker's RBAC in it; requests counted by the API server itself."""

    def __init__(self, endpoints: int) -> None:
        from tests.kube_real import conftest as kube

        self._kube = kube
        # Every endpoint holds one GPU (two once scaled) and runs a router on the CPU node.
        gpus = kube.GPUS_PER_NODE * kube.GPU_NODES["H100-SXM"]
        scale = max(1, math.ceil(endpoints * 2 / gpus), math.ceil(endpoints / 200))
        self._stack = contextlib.ExitStack()
        run_dir = Path(tempfile.mkdtemp(prefix="kube-scale-"))
        self.plane = self._stack.enter_context(kube.running_cluster(run_dir, scale))
        self.admin = kube.Admin(self.plane)
        self.admin.call("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        wait_for(lambda: self.admin.get(f"/api/v1/namespaces/{NS}/serviceaccounts/default"))
        self._token = kube.grant_worker_token(self.admin)

    def stop(self) -> None:
        self._stack.close()

    def kubeconfig(self, settings: Any) -> str:
        settings.PLINTH_KUBE_ALLOW_HOSTS = ["127.0.0.1"]
        return self._kube.worker_kubeconfig_for(self.plane, self.admin, NS, self._token)

    def count(self) -> tuple[int, dict[str, int]]:
        """Resource requests the API server counted since it started: all, and by "VERB
        resource" (/metrics and the health checks are no resource's, and left out)."""
        by: Counter[str] = Counter()
        for line in self.plane.get("/metrics").decode().splitlines():
            if not line.startswith("apiserver_request_total{"):
                continue
            labels_text, _, value = line[len("apiserver_request_total{") :].rpartition("} ")
            labels = dict(part.split("=", 1) for part in labels_text.split('",') if "=" in part)
            resource = labels.get("resource", "").strip('"')
            if resource:
                sub = labels.get("subresource", "").strip('"')
                verb = labels.get("verb", "").strip('"')
                by[f"{verb} {resource}{'/' + sub if sub else ''}"] += int(float(value))
        return sum(by.values()), dict(by)

    def run_pods(self, pods: list[tuple[str, str, str, bool]], cache: ClusterCache) -> None:
        """Wait for the controllers, the scheduler and kwok to run every pod, Ready."""
        deadline = time.monotonic() + max(600, len(pods))
        informer = cache.informers["Pod"]
        while sum(_ready(p) for p in informer.list(NS)) < len(pods):
            if time.monotonic() > deadline:
                raise SystemExit("the real cluster did not run every pod Ready in time")
            time.sleep(1.0)
        # Without LeaderWorkerSet's CRD its cache never syncs (and reads go to the API, 404).
        lws = self.admin.get("/apis/leaderworkerset.x-k8s.io/v1")
        settled_cache(cache, len(pods), absent=() if lws else ("LeaderWorkerSet",))

    def change_a_pod(self, deployment_id: str, slug: str) -> None:
        path = f"/api/v1/namespaces/{NS}/pods?labelSelector={L.DEPLOYMENT}={deployment_id}"
        pods = self.admin.call("GET", path).get("items") or []
        engine = next(p for p in pods if p["metadata"]["labels"].get(L.ROLE) != "router")
        self.admin.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{engine['metadata']['name']}")

    def background(self, window_s: float) -> dict[str, float]:
        """Requests per second by "VERB resource" over ``window_s`` seconds of no passes."""
        _, before = self.count()
        time.sleep(window_s)
        _, after = self.count()
        return {
            k: (v - before.get(k, 0)) / window_s for k, v in after.items() if v > before.get(k, 0)
        }


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_for(check: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("the real cluster did not get ready in time")
        time.sleep(0.3)


def settled_cache(cache: ClusterCache, pods: int, absent: tuple[str, ...] = ()) -> None:
    """Wait until every kind is listed, every watch open and ``pods`` pods are seen (their first
    requests are not steady state); ``absent``: kinds the cluster does not serve (no CRD)."""
    informers = [i for k, i in cache.informers.items() if k not in absent]
    for informer in informers:
        if not informer.wait_synced(300):
            raise SystemExit(f"the {informer.kind.plural} cache did not sync")
    deadline = time.monotonic() + 300
    while len(cache.informers["Pod"]) < pods or any(i.watches < 1 for i in informers):
        if time.monotonic() > deadline:
            raise SystemExit("the caches did not settle")
        time.sleep(0.1)


def figures(
    args: argparse.Namespace, per_pass: float, pass_s: float, change_s: list[float], **extra: Any
) -> dict[str, Any]:
    watches = len(extra.get("cached", {})) / WATCH_S if extra.get("cached") else 0.0
    return {
        "endpoints": args.endpoints,
        "per_pass": per_pass,
        "pass_ms": pass_s * 1000,
        "steady_rps": per_pass * args.endpoints / args.interval + watches,
        # A settled pass's requests do not depend on how many endpoints there are: the same
        # figure at 1,000 (for runs made smaller than that to fit a small machine).
        "rps_at_1000": per_pass * 1000 / args.interval + watches,
        "change_p50_ms": statistics.median(change_s) * 1000,
        "change_p99_ms": pct(change_s, 0.99) * 1000,
        "changes": len(change_s),
        "rss_mib": rss_mib(),
        **extra,
    }


def driver_mode(args: argparse.Namespace, emulator: Emulator) -> dict[str, Any]:
    """``old``, ``hash`` or ``informer``: a KubeDriver built here, passes as reconcile runs them."""
    refs = [
        DeploymentRef(
            id=f"00000000-0000-4000-8000-{i:012d}", slug=f"ep{i}", namespace=NS, api_key=ENGINE_KEY
        )
        for i in range(args.endpoints)
    ]
    first = revision_plan(load_spec("llama-3.1-8b-h100"), number=1)
    second = revision_plan(load_spec("llama-3.1-8b-ngram-h100"), number=2)
    client = KubeClient.for_host(emulator.url, timeout=30.0)
    base_rss = rss_mib()
    started = time.monotonic()
    creator = KubeDriver(client)
    for ref in refs:
        creator.apply(ref, first)
    emulator.pods([(r.id, r.slug, "engine", True) for r in refs])
    created_s = time.monotonic() - started

    cache = None
    if args.mode == "informer":
        cache = ClusterCache(KubeClient.for_host(emulator.url, timeout=30.0), NS, watch_s=WATCH_S)
        settled_cache(cache.start(), args.endpoints)
    driver = KubeDriver(client, skip_unchanged=args.mode != "old", cache=cache)

    sample = refs[: args.sample]
    before, kinds_before = emulator.count()
    started = time.monotonic()
    for ref in sample:
        driver.observe(ref)
        driver.apply(ref, first)
        driver.observe(ref)
    pass_s = (time.monotonic() - started) / len(sample)
    after, kinds = emulator.count()

    change_s = []
    for ref in refs[args.sample : args.sample + args.changes]:
        started = time.monotonic()
        driver.apply(ref, second)
        change_s.append(time.monotonic() - started)
    cached = {k: len(i) for k, i in cache.informers.items()} if cache else {}
    result = figures(
        args,
        (after - before) / len(sample),
        pass_s,
        change_s,
        created_s=created_s,
        rss_over_start_mib=rss_mib() - base_rss,
        by_method={k: v - kinds_before.get(k, 0) for k, v in kinds.items()},
        cached=cached,
    )
    if cache:
        cache.stop()
    return result


def worker_mode(args: argparse.Namespace, api: Emulator | RealServer) -> dict[str, Any]:
    """The production path: reconcile.reconcile over seeded endpoints, through driver_for with
    the caches a worker turns on as it starts, against the emulator or a real API server."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("PLINTH_ENV", "test")
    os.environ["PLINTH_TEST_DB_NAME"] = f"bench_plinth_kube_{os.getpid()}"
    # This process's changes send reconcile messages: to a queue no worker takes, dropped after.
    os.environ["CELERY_QUEUE"] = queue = f"plinth-bench-kube-{os.getpid()}"
    import django

    django.setup()
    import redis
    from django.conf import settings
    from django.test.utils import setup_databases, teardown_databases

    old = setup_databases(verbosity=0, interactive=False)
    try:
        return _worker_figures(args, api, settings)
    finally:
        from deployments.clusters import drivers as registry

        registry.watch_clusters(None)
        teardown_databases(old, verbosity=0)
        redis.Redis.from_url(settings.REDIS_URL).delete(queue)


def _worker_figures(
    args: argparse.Namespace, api: Emulator | RealServer, settings: Any
) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from controlplane import services as platform
    from deployments.clusters import drivers as registry
    from deployments.clusters import services as cluster_services
    from deployments.clusters.tasks import make_due_from_watch
    from deployments.endpoints import reconcile, services
    from deployments.endpoints.models import Deployment, Revision
    from tests.fixtures.endpoints import small_spec

    user = get_user_model().objects.create_user("bench", password="bench-password-123")
    org = platform.create_organization(name="Bench", owner=user)
    actor = platform.actor_for_user(user, org.pk)
    config = api.kubeconfig(settings)
    secret = platform.set_secret(actor, name="emu-kubeconfig", value=config)
    cluster = cluster_services.create_cluster(
        actor, name="emu", namespace=NS, kubeconfig_secret_id=secret.pk
    )
    # One endpoint made through the services, the rest its copies (the services' checks and
    # audit are not what this measures): each with its own revision 1.
    proto = services.create_deployment(
        actor,
        slug="ep0",
        name="ep0",
        spec={**small_spec(), "autoscaling": {"min_replicas": 1, "max_replicas": 2}},
        cluster_id=cluster.pk,
    )
    revision = proto.target_revision
    assert revision is not None
    copies = []
    for i in range(1, args.endpoints):
        copy = Deployment.objects.get(pk=proto.pk)
        copy.pk, copy.slug, copy.name, copy.target_revision = uuid.uuid4(), f"ep{i}", f"ep{i}", None
        copies.append(copy)
    Deployment.objects.bulk_create(copies, batch_size=500)
    revisions = []
    for copy in copies:
        rev = Revision.objects.get(pk=revision.pk)
        rev.pk, rev.deployment_id = uuid.uuid4(), copy.pk
        revisions.append(rev)
    Revision.objects.bulk_create(revisions, batch_size=500)
    for copy, rev in zip(copies, revisions, strict=True):
        copy.target_revision_id = rev.pk
    Deployment.objects.bulk_update(copies, ["target_revision"], batch_size=500)
    ids = [str(proto.pk), *(str(c.pk) for c in copies)]
    slugs = ["ep0", *(c.slug for c in copies)]

    base_rss = rss_mib()
    registry.watch_clusters(make_due_from_watch)  # what a starting worker does
    started = time.monotonic()
    for deployment_id in ids:  # the first passes apply every object
        reconcile.reconcile(deployment_id)
    pods = [
        (i, s, role, True) for i, s in zip(ids, slugs, strict=True) for role in ("engine", "router")
    ]
    driver = registry.driver_for(cluster)
    cache = driver.cache  # type: ignore[attr-defined]
    driver.close()
    api.run_pods(pods, cache)
    for deployment_id in ids:  # they see their pods ready: active
        reconcile.reconcile(deployment_id)
    created_s = time.monotonic() - started
    active = Deployment.objects.filter(status="active").count()

    sample = ids[: args.sample]
    # What the API server is asked while no pass runs (others' requests, on a real one).
    background = api.background(args.window)
    _, kinds_before = api.count()
    started = time.monotonic()
    for deployment_id in sample:
        reconcile.reconcile(deployment_id)
    took = time.monotonic() - started
    pass_s = took / len(sample)
    _, kinds = api.count()
    by_method = {
        k: v - kinds_before.get(k, 0) - background.get(k, 0.0) * took
        for k, v in kinds.items()
        if v > kinds_before.get(k, 0)
    }

    change_s = []
    for deployment_id in ids[-args.changes :]:  # endpoints the settled passes did not run
        services.scale(actor, deployment_id, replicas=2)
        started = time.monotonic()
        reconcile.reconcile(deployment_id)
        change_s.append(time.monotonic() - started)

    # A change on the cluster: an engine pod turns unready; its endpoint is due by the watch.
    due_s = []
    later = timezone.now() + timedelta(hours=1)
    watched = ids[args.sample : args.sample + min(10, len(ids) - args.sample)]
    Deployment.objects.filter(pk__in=watched).update(next_reconcile_at=later)
    for deployment_id, slug in zip(watched, slugs[args.sample :], strict=False):
        started = time.monotonic()
        api.change_a_pod(deployment_id, slug)
        row = Deployment.objects.filter(pk=deployment_id)
        while (row.values_list("next_reconcile_at", flat=True)[0] or later) > timezone.now():
            if time.monotonic() - started > 30:
                raise SystemExit("a watched change did not make its endpoint due")
            time.sleep(0.02)
        due_s.append(time.monotonic() - started)

    return figures(
        args,
        max(0.0, sum(by_method.values())) / len(sample),
        pass_s,
        change_s,
        created_s=created_s,
        active=active,
        rss_over_start_mib=rss_mib() - base_rss,
        by_method={k: round(v, 1) for k, v in by_method.items() if round(v, 1)},
        cached={k: len(i) for k, i in cache.informers.items()},
        due_p50_ms=statistics.median(due_s) * 1000,
        due_max_ms=max(due_s) * 1000,
        **(
            {"server_rps": sum(background.values()), "background": background} if background else {}
        ),
    )


def run_one(args: argparse.Namespace) -> None:
    """One mode, in this process: its figures as one JSON line."""
    logging.basicConfig(level=logging.ERROR)
    api = RealServer(args.endpoints) if args.mode == "real" else Emulator()
    try:
        if args.mode in {"worker", "real"}:
            result = worker_mode(args, api)
        else:
            assert isinstance(api, Emulator)
            result = driver_mode(args, api)
    finally:
        api.stop()
    print(json.dumps({"mode": args.mode, **result}))


ROWS = (
    ("API requests per settled pass", "per_pass", "{:.2f}"),
    ("server total (all clients), req/s", "server_rps", "{:.2f}"),
    ("steady state, API requests/s", "steady_rps", "{:.2f}"),
    ("  the same at 1,000 endpoints", "rps_at_1000", "{:.2f}"),
    ("settled pass, ms", "pass_ms", "{:.1f}"),
    ("change to API p50, ms", "change_p50_ms", "{:.1f}"),
    ("change to API p99, ms", "change_p99_ms", "{:.1f}"),
    ("cluster change to due p50, ms", "due_p50_ms", "{:.0f}"),
    ("worker RSS, MiB", "rss_mib", "{:.0f}"),
    ("  of which over the start, MiB", "rss_over_start_mib", "{:+.0f}"),
    ("seeding (apply all, pods), s", "created_s", "{:.1f}"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=100, help="endpoints given settled passes")
    parser.add_argument("--changes", type=int, default=50, help="endpoints given a change")
    parser.add_argument("--interval", type=float, default=10.0, help="PLINTH_SETTLED_RECONCILE_S")
    parser.add_argument("--window", type=float, default=30.0, help="real: seconds of no passes")
    parser.add_argument("--modes", default=",".join(MODES[:4]), help="which, comma-separated")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one, in this process
    args = parser.parse_args()
    # The settled passes and the changes go to different endpoints: both fit in any N >= 2.
    args.sample = max(1, min(args.sample, args.endpoints // 2))
    args.changes = max(1, min(args.changes, args.endpoints - args.sample))
    if args.mode:
        run_one(args)
        return
    results = []
    for mode in args.modes.split(","):
        if mode not in MODES:
            raise SystemExit(f"--modes: {mode!r} is none of {', '.join(MODES)}")
        command = [sys.executable, __file__, "--mode", mode, "--endpoints", str(args.endpoints),
                   "--sample", str(args.sample), "--changes", str(args.changes),
                   "--interval", str(args.interval), "--window", str(args.window)]  # fmt: skip
        print(f"running {mode}...", file=sys.stderr, flush=True)
        out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    print(f"{args.endpoints} endpoints on one cluster (emulated; real: a real API server); "
          f"settled passes on {args.sample}, "
          f"one per endpoint every {args.interval:g} s; {args.changes} changes")  # fmt: skip
    modes = [r["mode"] for r in results]
    print(f"{'':34}" + "".join(f"{m:>12}" for m in modes))
    for label, key, fmt in ROWS:
        cells = [fmt.format(r[key]) if key in r else "-" for r in results]
        print(f"{label:34}" + "".join(f"{c:>12}" for c in cells))
    for r in results:
        active = f"; {r['active']} active" if "active" in r else ""
        print(f"{r['mode']}: requests by method in the settled passes {r['by_method']}; "
              f"cached objects {r['cached'] or '-'}{active}")  # fmt: skip


if __name__ == "__main__":
    main()
