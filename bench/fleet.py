"""A cluster lost, and a cluster drained, under steady load: one endpoint over three clusters vs
the same endpoint on one (not a test).

Each "cluster" is what runs inside it: a real smg router (the flags a deployed endpoint gets,
``runtime.launch``) in front of ``--engines`` simulated engines (``runtime.sim``, real
processes). Plinth's gateway (its own code, ``gateway.app.Gateway``, built in process with a
Redis of the bench's own) takes the traffic: open loop, ``--rate`` chats a second from
``--tenants`` tenants (each its own long system prompt, so its own routing key), streamed and
not. The control plane's part (what the fleet's failover and drain write: a placement lost or
draining, replicas planned on the other clusters) is played by the bench, which writes the
gateway's route table as reconcile would, and starts the new replicas itself: there is no
Kubernetes here, and kwok pods could not serve. Runs, each on fresh processes:

- **one cluster, outage**: the baseline. ``3 x --engines`` engines behind one router; the
  cluster's router and engines are killed (SIGKILL), and come back after as long as the fleet
  took to restore its capacity in the run before (so both lose the same time).
- **three clusters, one lost**: ``--engines`` engines per cluster; one cluster's router and
  engines are killed. *Detected*: the gateway's health check (``gateway.health``) has the
  router down. Then, ``--grace`` seconds after the kill (the control plane's grace period
  before it re-plans a silent cluster, ``deployments.fleet.health``), the lost cluster's
  replicas are started on the others and added to their routers; *capacity back*: they all
  serve there (the route table counts them).
- **three clusters, one drained**: make before break, as the fleet's drain does: the drained
  cluster's replicas are started on the others first; once they serve, its placement is
  *draining* (the gateway sends it nothing new), its in-flight requests finish, then its
  router and engines stop.

- **three real API servers, one stopped** (``--control-plane``): the control plane's half on
  real clusters (tests/kube_real's control planes, whose kwok pods cannot serve, so no request
  is sent): the worker's reconcile passes and the clusters' availability checks run in real
  time; *detected* is the cluster marked unavailable, *capacity back* its replicas ready on the
  other two.

Counted, per run: requests sent; those failed while in flight at the event (sent before it,
not answered before it); those sent after the event but before detection; those sent after
detection (the target is 0); the time to detect and until the capacity is back. A request
failed unless it was answered 200 and whole. Times are wall-clock seconds on this machine with
simulated engines (``--time-scale``). A lost cluster's API server would not stop its data
plane: this bench loses the data plane itself (a zone or region going dark), the harder case.
Run: ``python bench/fleet.py`` (about four minutes; ``--control-plane`` adds about two, and
needs the binaries scripts/kube_binaries.sh builds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("PLINTH_ENV", "test")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from replica_failure import private_redis  # noqa: E402  (beside this script)

from controlplane.crypto import engine_api_key  # noqa: E402
from controlplane.keys import generate_key  # noqa: E402
from gateway.app import Gateway  # noqa: E402
from gateway.config import GatewayConfig  # noqa: E402
from gateway.routes import (  # noqa: E402
    DRAINING,
    LOST,
    ClusterRoute,
    Endpoint,
    InferenceKey,
    RouteTable,
)
from runtime.client import RouterClient  # noqa: E402
from runtime.launch import cache_aware_args, smg_policy  # noqa: E402
from runtime.sim.launcher import (  # noqa: E402
    ManagedProcess,
    SimCluster,
    router_workers,
    start_engine,
    wait_engine_ready,
)
from runtime.spec import PLINTH_ROUTING  # noqa: E402

SLUG = "bench-fleet"
CONTROL_PLANE_SPEC: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
}
NAMES = ("east", "west", "north")


@dataclass
class Sent:
    started: float
    ended: float
    ok: bool


@dataclass
class Outcome:
    """One run's figures (seconds from the event; None where it does not apply)."""

    name: str
    sent: int = 0
    failed_in_flight: int = 0
    failed_before_detection: int = 0
    failed_after_detection: int = 0
    detect_s: float | None = None
    capacity_s: float | None = None
    p50_ms: float = 0.0
    notes: list[str] = field(default_factory=list)
    traffic: bool = True  # requests were sent (not on the real control planes)


def system_prompt(tenant: int) -> str:
    return f"You answer for tenant number {tenant} of the fleet bench. Be brief. " * 30


class Fleet:
    """The clusters of one run, the gateway in front of them, and the route table it reads."""

    def __init__(self, args: argparse.Namespace, clusters: int, engines: int) -> None:
        self.args = args
        self.endpoint_id = str(uuid.uuid4())
        self.api_key = engine_api_key(self.endpoint_id)
        self.log_dir = Path(tempfile.mkdtemp(prefix="plinth-bench-fleet-"))
        policy = smg_policy("cache_aware", PLINTH_ROUTING)
        self.sims = {
            NAMES[i]: SimCluster(
                engines,
                policy=policy,
                router_args=cache_aware_args(PLINTH_ROUTING),
                time_scale=args.time_scale,
                log_dir=self.log_dir / NAMES[i],
                api_key=self.api_key,
            )
            for i in range(clusters)
        }
        self.extra: list[ManagedProcess] = []  # replicas started elsewhere by a failover
        self.added = dict.fromkeys(self.sims, 0)
        self.routes = {
            name: ClusterRoute(name if clusters > 1 else "", "", engines) for name in self.sims
        }
        new = generate_key("inference")
        self.org = str(uuid.uuid4())
        self.key = InferenceKey(
            str(uuid.uuid4()), new.prefix, new.key_hash, self.org, frozenset(), None, None, None
        )
        self.plaintext = new.plaintext
        self.gateway = Gateway(
            GatewayConfig(redis_url=args.redis_url, router_probe_seconds=args.probe_seconds),
            self.table,
        )

    def table(self) -> RouteTable:
        """The route table as reconcile would record the placements now."""
        routes = tuple(self.routes.values())
        endpoint = Endpoint(
            self.endpoint_id, SLUG, self.org, "active", "running",
            sum(r.ready_replicas for r in routes), routes[0].router_url,
            upstream_auth=b"Bearer " + self.api_key.encode(), placed=True,
            clusters=routes if len(routes) > 1 else (),
        )  # fmt: skip
        return RouteTable({SLUG: endpoint}, {self.key.prefix: self.key}, time.time())

    async def start(self) -> None:
        for name, sim in self.sims.items():
            await asyncio.to_thread(sim.start)
            self.routes[name] = replace(self.routes[name], router_url=sim.url)
        await self.gateway.startup()

    async def set_route(self, name: str, **changes: object) -> None:
        """A placement's change as reconcile records it, read by the gateway at once (as the
        change notification makes it)."""
        self.routes[name] = replace(self.routes[name], **changes)  # type: ignore[arg-type]
        await self.gateway.refresher.reload()

    def kill(self, name: str) -> None:
        sim = self.sims[name]
        assert sim.router is not None
        for process in [sim.router, *sim.engines]:
            process.popen.kill()
        for process in [sim.router, *sim.engines]:
            process.popen.wait(10)

    async def add_replicas(self, name: str, count: int) -> None:
        """``count`` more engines behind ``name``'s router, counted once the router has them."""
        if count < 1:
            return
        sim = self.sims[name]
        engines = [
            start_engine(
                args=["--api-key", self.api_key], time_scale=self.args.time_scale,
                log_dir=self.log_dir / name, name=f"moved-{len(self.extra) + i}", wait=False,
            )
            for i in range(count)
        ]  # fmt: skip
        self.extra += engines
        self.added[name] += count
        for engine in engines:
            await asyncio.to_thread(wait_engine_ready, engine)
            with RouterClient(sim.url, api_key=self.api_key) as client:
                await asyncio.to_thread(client.add_worker, engine.url, api_key=self.api_key)
        want = len(sim.engines) + self.added[name]
        while True:
            workers = await asyncio.to_thread(router_workers, sim.url, self.api_key)
            if sum(1 for w in workers if w.get("is_healthy", True)) >= want:
                break
            await asyncio.sleep(0.1)
        await self.set_route(name, ready_replicas=want)

    async def close(self) -> None:
        await self.gateway.shutdown()
        for sim in self.sims.values():
            await asyncio.to_thread(sim.close)
        for engine in self.extra:
            await asyncio.to_thread(engine.stop)


class Traffic:
    """Open loop: a chat every 1/rate seconds, whatever became of the earlier ones."""

    def __init__(self, fleet: Fleet, args: argparse.Namespace) -> None:
        self.fleet, self.args = fleet, args
        self.sent: list[Sent] = []
        self._stop = asyncio.Event()
        self._client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=fleet.gateway), base_url="http://gateway"
        )
        self._task: asyncio.Task[None] | None = None

    async def _one(self, n: int) -> None:
        tenant = n % self.args.tenants
        messages = [
            {"role": "system", "content": system_prompt(tenant)},
            {"role": "user", "content": f"Question {random.random():.6f}?"},
        ]
        stream = (n // self.args.tenants) % 2 == 1
        body = {"model": "sim/llama-test", "messages": messages, "stream": stream}
        body.update(max_tokens=self.args.output_tokens, ignore_eos=True)
        started = time.monotonic()
        try:
            answer = await self._client.post(
                f"/endpoints/{SLUG}/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {self.fleet.plaintext}"},
                timeout=60,
            )
        except httpx.HTTPError:
            self.sent.append(Sent(started, time.monotonic(), False))
            return
        text = answer.text
        whole = text.rstrip().endswith("data: [DONE]") if stream else '"choices"' in text
        ok = answer.status_code == 200 and whole and '"error"' not in text
        self.sent.append(Sent(started, time.monotonic(), ok))

    async def _loop(self) -> None:
        pending: set[asyncio.Task[None]] = set()
        n = 0
        while not self._stop.is_set():
            task = asyncio.create_task(self._one(n))
            pending.add(task)
            task.add_done_callback(pending.discard)
            n += 1
            await asyncio.sleep(1 / self.args.rate)
        await asyncio.gather(*pending)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def warm(self) -> None:
        while len(self.sent) < self.args.tenants * 3:
            await asyncio.sleep(0.05)

    async def run_for(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        await self._client.aclose()


def tally(outcome: Outcome, sent: list[Sent], event: float, detected: float) -> Outcome:
    outcome.sent = len(sent)
    for s in sent:
        if s.ok:
            continue
        if s.started <= event:
            outcome.failed_in_flight += s.ended > event
        elif s.started <= detected:
            outcome.failed_before_detection += 1
        else:
            outcome.failed_after_detection += 1
    times = [s.ended - s.started for s in sent if s.ok]
    outcome.p50_ms = statistics.median(times) * 1000 if times else 0.0
    return outcome


async def until_down(fleet: Fleet, name: str, since: float) -> float:
    """When the gateway's health check put ``name``'s router down (monotonic)."""
    url = fleet.routes[name].router_url
    while (down := fleet.gateway.health.down_since(url)) is None:
        if time.monotonic() - since > 120:
            raise RuntimeError(f"the gateway never noticed {name}'s router was gone")
        await asyncio.sleep(0.01)
    return down


async def move_north(fleet: Fleet, engines: int) -> None:
    """North's ``engines`` replicas started on east and west (half each, east the odd one)."""
    east, west = engines - engines // 2, engines // 2
    await asyncio.gather(fleet.add_replicas("east", east), fleet.add_replicas("west", west))


async def lose_one(args: argparse.Namespace) -> Outcome:
    fleet = Fleet(args, clusters=3, engines=args.engines)
    outcome = Outcome("3 clusters, one lost")
    await fleet.start()
    traffic = Traffic(fleet, args)
    try:
        traffic.start()
        await traffic.warm()
        event = time.monotonic()
        fleet.kill("north")
        detected = await until_down(fleet, "north", event)
        outcome.detect_s = detected - event
        await asyncio.sleep(max(0.0, event + args.grace - time.monotonic()))
        await fleet.set_route("north", ready_replicas=0, state=LOST)
        await move_north(fleet, args.engines)
        outcome.capacity_s = time.monotonic() - event
        await traffic.run_for(args.after)
    finally:
        await traffic.stop()
        await fleet.close()
    return tally(outcome, traffic.sent, event, detected)


async def drain_one(args: argparse.Namespace) -> Outcome:
    fleet = Fleet(args, clusters=3, engines=args.engines)
    outcome = Outcome("3 clusters, one drained")
    await fleet.start()
    traffic = Traffic(fleet, args)
    try:
        traffic.start()
        await traffic.warm()
        event = time.monotonic()
        await move_north(fleet, args.engines)
        await fleet.set_route("north", state=DRAINING)
        drained = time.monotonic()
        # Its last requests finish (the longest answer is well under this), then it stops.
        await asyncio.sleep(args.drain_wait)
        await fleet.set_route("north", ready_replicas=0, state=LOST)
        await asyncio.to_thread(fleet.sims["north"].close)
        outcome.capacity_s = time.monotonic() - event
        outcome.notes.append(f"traffic off the drained cluster {drained - event:.1f} s in")
        await traffic.run_for(args.after)
    finally:
        await traffic.stop()
        await fleet.close()
    return tally(outcome, traffic.sent, event, event)  # announced: nothing to detect


async def one_cluster_outage(args: argparse.Namespace, outage: float) -> Outcome:
    fleet = Fleet(args, clusters=1, engines=3 * args.engines)
    outcome = Outcome("1 cluster, outage")
    await fleet.start()
    traffic = Traffic(fleet, args)
    try:
        traffic.start()
        await traffic.warm()
        event = time.monotonic()
        fleet.kill(NAMES[0])
        await asyncio.sleep(outage)
        sim = fleet.sims[NAMES[0]]
        sim.engines, sim.router = [], None
        await asyncio.to_thread(sim.start)  # the same cluster back, on new ports
        await fleet.set_route(NAMES[0], router_url=sim.url)
        outcome.capacity_s = time.monotonic() - event
        await traffic.run_for(args.after)
    finally:
        await traffic.stop()
        await fleet.close()
    outcome.notes.append("no other cluster: nothing to fail over to, so nothing counts as detected")
    return tally(outcome, traffic.sent, event, math.inf)


def api_server_lost(args: argparse.Namespace) -> Outcome:
    """Three real control planes (tests/kube_real's: etcd, kube-apiserver, controllers, kwok's
    GPU nodes and Ready pods, nothing that serves), one endpoint spread over them by the real
    writers, the worker's reconcile passes (one a second) and the clusters' availability checks
    (every ``PLINTH_CLUSTER_CHECK_INTERVAL_S``) run here in real time; one API server stops.
    *Detected*: the control plane marks its cluster unavailable; *capacity back*: the replicas
    it had are ready on the other two. A throw-away database of its own."""
    from django.test.utils import setup_databases, teardown_databases

    from tests.kube_real.conftest import running_cluster

    old = setup_databases(verbosity=0, interactive=False)
    try:
        with contextlib.ExitStack() as stack:
            planes = [
                stack.enter_context(running_cluster(Path(tempfile.mkdtemp(prefix=f"kube-{n}-"))))
                for n in NAMES
            ]
            return _failover_on(planes, args)
    finally:
        teardown_databases(old, verbosity=0)


def _failover_on(planes: list[Any], args: argparse.Namespace) -> Outcome:
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from controlplane import services as platform
    from deployments.clusters import services as cluster_services
    from deployments.clusters.models import Cluster
    from deployments.drivers.errors import DriverError
    from deployments.endpoints import reconcile, services
    from deployments.fleet import health
    from deployments.fleet import services as fleet
    from deployments.fleet.models import Placement
    from tests.kube_real.conftest import Admin, grant_worker_token, worker_kubeconfig_for

    settings.PLINTH_KUBE_ALLOW_HOSTS = ["127.0.0.1"]  # the control planes are on loopback
    settings.PLINTH_STARTUP_WINDOW_S = 3600
    user = get_user_model().objects.create_user("bench", password="bench-password-123")
    org = platform.create_organization(name="Bench", owner=user)
    actor = platform.actor_for_user(user, org.pk)
    for name, plane in zip(NAMES, planes, strict=True):
        admin = Admin(plane)
        token = grant_worker_token(admin)
        admin.call("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})
        while not admin.get("/api/v1/namespaces/bench/serviceaccounts/default"):
            time.sleep(0.3)
        config = worker_kubeconfig_for(plane, admin, "bench", token)
        secret = platform.set_secret(actor, name=f"{name}-kubeconfig", value=config)
        cluster_services.create_cluster(
            actor, name=name, namespace="bench", kubeconfig_secret_id=secret.pk
        )
    spec = {**CONTROL_PLANE_SPEC, "autoscaling": {"min_replicas": 1, "max_replicas": 6}}
    home = Cluster.objects.get(name=NAMES[0])
    endpoint = services.create_deployment(
        actor, slug="chat", name="Chat", spec=spec, cluster_id=home.pk, replicas=3
    )
    fleet.set_placement(
        actor, endpoint.pk, policy="spread", clusters=[{"cluster": n} for n in NAMES]
    )

    def ready_on(names: tuple[str, ...]) -> int:
        rows = Placement.objects.filter(deployment=endpoint, cluster__name__in=names)
        return sum(rows.values_list("ready_replicas", flat=True))

    def step() -> None:
        # A loaded API server's 429, or the stopped one: the worker's task would retry.
        with contextlib.suppress(DriverError):
            reconcile.reconcile(str(endpoint.pk))

    while ready_on(NAMES) < 3:
        step()
        time.sleep(1.0)
    outcome = Outcome("3 real API servers, one stopped (no data path)", traffic=False)
    planes[2].stop_api_server()
    event = time.monotonic()
    next_check = event
    lost = Cluster.objects.get(name=NAMES[2])
    while ready_on(NAMES[:2]) < 3:
        if time.monotonic() >= next_check:
            for cluster in Cluster.objects.all():
                health.check_cluster(cluster)
            next_check += settings.PLINTH_CLUSTER_CHECK_INTERVAL_S
            lost.refresh_from_db()
            if outcome.detect_s is None and not lost.available:
                outcome.detect_s = time.monotonic() - event
        step()
        time.sleep(1.0)
        if time.monotonic() - event > 300:
            outcome.notes.append("capacity not back within 300 s")
            break
    else:
        outcome.capacity_s = time.monotonic() - event
    outcome.notes.append(
        f"control plane: lost after {settings.PLINTH_CLUSTER_LOST_AFTER_S} s of failed checks "
        f"every {settings.PLINTH_CLUSTER_CHECK_INTERVAL_S} s; kwok's pods are Ready at once"
    )
    return outcome


def print_table(outcomes: list[Outcome], args: argparse.Namespace) -> None:
    print()
    print(
        f"One endpoint under {args.rate:g} chats/s ({args.tenants} tenants, "
        f"{args.output_tokens} output tokens, time scale {args.time_scale:g}); "
        f"{3 * args.engines} engines in all; control plane grace {args.grace:g} s; "
        f"router probes every {args.probe_seconds:g} s. Seconds from the event."
    )

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    def sent(o: Outcome, value: float, unit: str = "{:.0f}") -> str:
        return unit.format(value) if o.traffic else "-"

    rows = [
        ("requests sent", [sent(o, o.sent) for o in outcomes]),
        ("failed: in flight at the event", [sent(o, o.failed_in_flight) for o in outcomes]),
        ("failed: sent before detection", [sent(o, o.failed_before_detection) for o in outcomes]),
        ("failed: sent after detection", [sent(o, o.failed_after_detection) for o in outcomes]),
        ("time to detect (s)", [cell(o.detect_s) for o in outcomes]),
        ("capacity back (s)", [cell(o.capacity_s) for o in outcomes]),
        ("latency p50 of answered (ms)", [sent(o, o.p50_ms) for o in outcomes]),
    ]
    print("| |" + "|".join(f" {o.name} " for o in outcomes) + "|")
    print("|---|" + "---|" * len(outcomes))
    for label, cells in rows:
        print(f"| {label} |" + "|".join(f" {c} " for c in cells) + "|")
    for o in outcomes:
        for note in o.notes:
            print(f"- {o.name}: {note}")


async def run_all(args: argparse.Namespace) -> list[Outcome]:
    lost = await lose_one(args)
    print(f"  lost: {lost}", flush=True)
    drained = await drain_one(args)
    print(f"  drained: {drained}", flush=True)
    baseline = await one_cluster_outage(args, lost.capacity_s or args.grace)
    print(f"  one cluster: {baseline}", flush=True)
    return [baseline, lost, drained]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", type=int, default=2, help="engines per cluster of three")
    parser.add_argument("--rate", type=float, default=10.0, help="chats per second, in all")
    parser.add_argument("--tenants", type=int, default=12)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument(
        "--grace",
        type=float,
        default=None,
        help="seconds before a silent cluster's replicas are planned elsewhere (default: the "
        "control plane's, PLINTH_CLUSTER_LOST_AFTER_S plus one PLINTH_CLUSTER_CHECK_INTERVAL_S)",
    )
    parser.add_argument("--probe-seconds", type=float, default=1.5)
    parser.add_argument(
        "--control-plane",
        action="store_true",
        help="also stop one of three real API servers (needs scripts/kube_binaries.sh's build)",
    )
    parser.add_argument("--drain-wait", type=float, default=5.0)
    parser.add_argument("--after", type=float, default=10.0, help="traffic after the capacity")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # The real control planes' run makes (and drops) a database of its own, and its changes'
    # reconcile messages go to a queue no worker takes.
    os.environ["PLINTH_TEST_DB_NAME"] = f"bench_plinth_fleet_{os.getpid()}"
    os.environ["CELERY_QUEUE"] = f"plinth-bench-fleet-{os.getpid()}"
    import django

    django.setup()
    from django.conf import settings

    if args.grace is None:
        args.grace = float(settings.PLINTH_CLUSTER_LOST_AFTER_S)
        args.grace += settings.PLINTH_CLUSTER_CHECK_INTERVAL_S  # the check that finds it late
    args.redis_url, server = private_redis(Path(tempfile.mkdtemp(prefix="plinth-bench-redis-")))
    try:
        outcomes = asyncio.run(run_all(args))
    finally:
        server.kill()
        server.wait()
    if args.control_plane:
        outcomes.append(api_server_lost(args))
        print(f"  real control planes: {outcomes[-1]}", flush=True)
    print_table(outcomes, args)


if __name__ == "__main__":
    main()
