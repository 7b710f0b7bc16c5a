"""The Kubernetes driver at 1,000 endpoints on one emulated cluster: API requests at steady state,
the time for a change to reach the API, and the worker's memory.

The API emulator (tests/drivers/kube_emulator.py: kmock plus list/watch with resourceVersion)
runs in a child process, so the memory figure is the worker's alone. The bench creates N
endpoints (every object each renders, and one ready pod each), then runs settled passes as
``deployments.reconcile`` does (observe, apply, observe) on a sample of them and counts the
requests the emulator received. Requests per second at steady state are that count per pass,
times N endpoints, at one pass per endpoint every ``--interval`` seconds
(``PLINTH_SETTLED_RECONCILE_S``, 10 s), plus the watches the caches re-open. A change is a new
revision on a sample of endpoints; its time is from the start of the pass until apply returns,
i.e. until every changed object was written (the queue in front of the pass is not in it).

    .venv/bin/python bench/kube_scale.py                 # the informer path
    .venv/bin/python bench/kube_scale.py --mode old      # every object read and pruned per pass
    .venv/bin/python bench/kube_scale.py --mode hash     # set-hash skip, no caches
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import statistics
import sys
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deployments.drivers.base import DeploymentRef  # noqa: E402
from deployments.drivers.kube import labels as L  # noqa: E402
from deployments.drivers.kube.client import KubeClient  # noqa: E402
from deployments.drivers.kube.driver import KubeDriver  # noqa: E402
from deployments.drivers.kube.informer import ClusterCache  # noqa: E402
from tests.drivers.reference_specs import ENGINE_KEY, load_spec, revision_plan  # noqa: E402

NS = "bench"


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
                for ref_id, slug in arg:
                    emulator.put("v1", "Pod", NS, ready_pod(ref_id, slug))
                conn.send(None)
            else:
                conn.send(None)
                return


def ready_pod(ref_id: str, slug: str) -> dict[str, Any]:
    container = {
        "name": "engine",
        "ready": True,
        "started": True,
        "restartCount": 0,
        "state": {"running": {}},
    }
    return {
        "metadata": {
            "name": f"{slug}-engine-0",
            "namespace": NS,
            "labels": L.object_labels(slug, ref_id, 1, "engine"),
        },
        "spec": {
            "containers": [{"name": "engine", "image": "x", "ports": [{"containerPort": 30000}]}]
        },
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--sample", type=int, default=100, help="endpoints given settled passes")
    parser.add_argument("--changes", type=int, default=50, help="endpoints given a new revision")
    parser.add_argument("--interval", type=float, default=10.0, help="PLINTH_SETTLED_RECONCILE_S")
    parser.add_argument("--mode", choices=["informer", "hash", "old"], default="informer")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)

    parent, child = multiprocessing.Pipe()
    server = multiprocessing.get_context("fork").Process(target=serve, args=(child,), daemon=True)
    server.start()
    url = parent.recv()

    def count() -> tuple[int, dict[str, int]]:
        parent.send(("count", None))
        result: tuple[int, dict[str, int]] = parent.recv()
        return result

    refs = [
        DeploymentRef(
            id=f"00000000-0000-4000-8000-{i:012d}", slug=f"ep{i}", namespace=NS, api_key=ENGINE_KEY
        )
        for i in range(args.endpoints)
    ]
    first = revision_plan(load_spec("llama-3.1-8b-h100"), number=1)
    second = revision_plan(load_spec("llama-3.1-8b-ngram-h100"), number=2)
    client = KubeClient.for_host(url, timeout=30.0)
    base_rss = rss_mib()

    started = time.monotonic()
    creator = KubeDriver(client)
    for ref in refs:
        creator.apply(ref, first)
    parent.send(("pods", [(r.id, r.slug) for r in refs]))
    parent.recv()
    created_s = time.monotonic() - started

    cache = None
    if args.mode == "informer":
        cache = ClusterCache(KubeClient.for_host(url, timeout=30.0), NS, watch_s=300).start()
        for informer in cache.informers.values():
            if not informer.wait_synced(120):
                raise SystemExit(f"the {informer.kind.plural} cache did not sync")
        # Settled: every pod seen and every watch open (their first requests are not steady state).
        pods = cache.informers["Pod"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (
            len(pods) < args.endpoints or any(i.watches < 1 for i in cache.informers.values())
        ):
            time.sleep(0.1)
    driver = KubeDriver(client, skip_unchanged=args.mode != "old", cache=cache)

    # Steady state: settled passes on a sample.
    sample = refs[: args.sample]
    before, kinds_before = count()
    started = time.monotonic()
    for ref in sample:
        driver.observe(ref)
        driver.apply(ref, first)
        driver.observe(ref)
    pass_s = (time.monotonic() - started) / len(sample)
    after, kinds = count()
    per_pass = (after - before) / len(sample)
    settled_kinds = {k: v - kinds_before.get(k, 0) for k, v in kinds.items()}
    watch_reopens = (len(cache.informers) / 300) if cache else 0.0
    steady_rps = per_pass * args.endpoints / args.interval + watch_reopens

    # Changes: a new revision, applied in one pass.
    change_s = []
    for ref in refs[args.sample : args.sample + args.changes]:
        started = time.monotonic()
        driver.apply(ref, second)
        change_s.append(time.monotonic() - started)

    rss = rss_mib()
    print(f"mode: {args.mode}; {args.endpoints} endpoints on one emulated cluster")
    print(f"created in {created_s:.1f} s")
    print(
        f"settled pass: {per_pass:.2f} API requests ({pass_s * 1000:.1f} ms), sample {len(sample)}"
    )
    print(
        f"steady state: {steady_rps:.2f} API requests/s at one pass per endpoint every "
        f"{args.interval:g} s"
    )
    print(
        f"change to API: p50 {statistics.median(change_s) * 1000:.1f} ms, "
        f"p99 {pct(change_s, 0.99) * 1000:.1f} ms ({len(change_s)} changes)"
    )
    print(f"worker RSS: {rss:.0f} MiB ({rss - base_rss:+.0f} MiB over the start)")
    if cache:
        sizes = {k: len(i) for k, i in cache.informers.items()}
        print(f"cached objects: {sizes}")
    print(f"requests by method in the settled passes: {settled_kinds}")
    if cache:
        cache.stop()
    parent.send(("stop", None))
    parent.recv()
    server.join(10)


if __name__ == "__main__":
    main()
