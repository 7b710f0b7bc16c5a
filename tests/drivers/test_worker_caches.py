"""The worker's list+watch caches in production: ``driver_for`` reads through them in a worker
(and only there), a settled reconcile pass asks the API nothing, a change on the cluster to an
endpoint's objects makes that endpoint due (a burst once), the GPU inventory reads nodes from
the cache, events name their pod's role, and a short prefill/decode pool degrades the endpoint.

The cluster is the API emulator (tests/drivers/kube_emulator.py) reached through a kubeconfig,
as a tenant's is; passes are the real ``reconcile.reconcile``.

Why the emulator (a stand-in, see kube_emulator.py): the tests count the requests a pass or the
inventory makes (none for a settled pass, one cluster-wide LIST of pods), and write pods and events
of a split endpoint in states kwok does not produce on demand (a pool short of its replicas,
BackOff events). The cache following an endpoint and the inventory adding up on the real server are
tests/kube_real/test_worker_cache_on_real_cluster.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from deployments import status
from deployments.clusters import drivers as registry
from deployments.drivers.base import Observation, ReplicaFacts
from deployments.drivers.kube import informer as informer_module
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.informer import ClusterCache
from deployments.drivers.kube.observe import observation
from deployments.endpoints import due, reconcile
from deployments.endpoints.models import Deployment, Revision
from tests.drivers.kube_emulator import CLIENT_TIMEOUT_S, RunningEmulator
from tests.drivers.test_gpu_placement import H100, node
from tests.endpoints.test_reconcile_kube import put_pod, running
from tests.fixtures.endpoints import NS, refresh
from tests.waiting import wait_until


class Batches:
    """What the caches hand to the worker: batches of endpoint ids (a stand-in for
    ``due.make_due``, whose rows a test's transaction hides from other threads)."""

    def __init__(self) -> None:
        self.seen: list[set[str]] = []
        self.lock = threading.Lock()

    def __call__(self, ids: set[str]) -> None:
        with self.lock:
            self.seen.append(set(ids))

    def ids(self) -> set[str]:
        with self.lock:
            return set().union(*self.seen)


@pytest.fixture
def batches() -> Iterator[Batches]:
    """This process plays a worker: its kube drivers read through caches."""
    collected = Batches()
    registry.watch_clusters(collected)
    yield collected
    registry.watch_clusters(None)  # stops every cache it started


def synced(driver: KubeDriver) -> ClusterCache:
    assert driver.cache is not None
    for informer in driver.cache.informers.values():
        if informer.kind.kind != "LeaderWorkerSet":  # the emulator serves it; wait all the same
            assert informer.wait_synced(10)
    return driver.cache


def api_calls(emulator: RunningEmulator, since: int) -> list[tuple[str, str]]:
    """Requests after the ``since``-th, watches left out (they are the caches' own)."""
    requests = list(emulator.emulator._requests)[since:]
    return [(r.method.value, r.url.path) for r in requests if r.params.get("watch") != "true"]


@pytest.mark.django_db
def test_only_a_worker_reads_through_one_cache_per_cluster(kube_endpoint: Deployment) -> None:
    cluster = kube_endpoint.cluster
    plain = registry.driver_for(cluster)
    assert isinstance(plain, KubeDriver) and plain.cache is None  # web processes watch nothing
    plain.close()
    registry.watch_clusters(Batches())
    try:
        first, second = registry.driver_for(cluster), registry.driver_for(cluster)
        assert isinstance(first, KubeDriver) and isinstance(second, KubeDriver)
        assert first.cache is not None and first.cache is second.cache
        assert first.cache.namespace == NS
        first.close()  # a pass's driver closes its client, not the cache's
        assert synced(second).informers["Pod"].synced
        second.close()
    finally:
        registry.watch_clusters(None)
    assert not informer_module._caches


@pytest.mark.django_db
def test_a_settled_pass_through_the_worker_cache_asks_the_api_nothing(
    kube_endpoint: Deployment, emulator: RunningEmulator, batches: Batches
) -> None:
    driver = registry.driver_for(kube_endpoint.cluster)
    assert isinstance(driver, KubeDriver)
    cache = synced(driver)
    reconcile.reconcile(str(kube_endpoint.pk))  # the first pass applies everything
    put_pod(emulator, kube_endpoint, "kchat-engine-1", running(True))
    put_pod(emulator, kube_endpoint, "kchat-router-1", running(True, role="router"), role="router")
    pods = cache.informers["Pod"]
    wait_until(lambda: len(pods.list(NS)) == 2, "the pods are in the cache")
    # The pass that sees them ready writes nothing to the cluster, only to the database.
    wait_until(
        lambda: reconcile.reconcile(str(kube_endpoint.pk)) and refresh(kube_endpoint).settled,
        "settled",
    )
    anchor = cache.informers["Service"].get(NS, "kchat-router")
    assert anchor is not None and L.SET_HASH in anchor["metadata"]["annotations"]
    start = len(emulator.emulator._requests)
    reconcile.reconcile(str(kube_endpoint.pk))
    assert api_calls(emulator, start) == []
    assert refresh(kube_endpoint).status == status.ACTIVE
    # Every change the cache saw was about this endpoint, handed over in debounced batches.
    wait_until(lambda: batches.ids() == {str(kube_endpoint.pk)}, "the changes handed over")


@pytest.mark.django_db
def test_a_burst_of_changes_to_an_endpoints_objects_makes_it_due_once(
    kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    batches = Batches()
    cache = ClusterCache(KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S), NS)
    cache.on_change(batches, debounce_s=0.5)
    cache.start()
    try:
        for informer in cache.informers.values():
            assert informer.wait_synced(10)
        for n in range(5):  # a pod restarting: five watch events within the debounce
            put_pod(emulator, kube_endpoint, "kchat-engine-1", running(n % 2 == 0))
        foreign = {"metadata": {"name": "other", "namespace": NS, "labels": {"app": "x"}}}
        emulator.put("v1", "Pod", NS, foreign)  # not Plinth's: no endpoint is due
        wait_until(lambda: batches.seen, "a batch")
        assert batches.seen == [{str(kube_endpoint.pk)}]
        # An Event names a pod, not an endpoint: the pod's labels say whose it is.
        wait_until(lambda: cache.informers["Pod"].get(NS, "kchat-engine-1"), "the pod cached")
        emulator.put("v1", "Event", NS, _event("kchat-engine-1", "BackOff", "e-1"))
        wait_until(lambda: len(batches.seen) == 2, "a second batch")
        assert batches.seen[1] == {str(kube_endpoint.pk)}
    finally:
        cache.stop()


@pytest.mark.django_db
def test_a_due_endpoint_stays_due_and_a_later_one_is_due_now(kube_endpoint: Deployment) -> None:
    later = timezone.now() + timedelta(seconds=10)
    Deployment.objects.filter(pk=kube_endpoint.pk).update(next_reconcile_at=later)
    assert due.make_due({str(kube_endpoint.pk), "not-an-id", "app"}) == 1
    next_at = refresh(kube_endpoint).next_reconcile_at
    assert next_at is not None and next_at <= timezone.now()
    assert due.make_due({str(kube_endpoint.pk)}) == 0  # already due: left as it is


def test_the_inventory_reads_nodes_from_a_synced_cache(emulator: RunningEmulator) -> None:
    emulator.put("v1", "Node", None, node("h100-a", H100))  # type: ignore[arg-type]
    cache = ClusterCache(KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S), NS).start()
    client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
    try:
        nodes = cache.informers["Node"]
        assert nodes.wait_synced(10) and len(nodes) == 1
        start = len(emulator.emulator._requests)
        inventory = KubeDriver(client, cache=cache).gpu_inventory()
        assert inventory["gpus"]["H100-SXM"]["gpus"] == 8
        # One LIST (every namespace's unfinished pods hold GPUs); the nodes came from the cache.
        # (The other kinds' caches list their own namespace meanwhile: not the inventory's.)
        cluster_wide = [
            call for call in api_calls(emulator, start) if "/namespaces/" not in call[1]
        ]
        assert cluster_wide == [("GET", "/api/v1/pods")]
    finally:
        cache.stop()
        client.close()


def _event(pod: str, reason: str, uid: str, message: str = "Back-off restarting") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pod}.{uid}", "namespace": NS, "uid": uid},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": NS},
        "reason": reason,
        "type": "Warning",
        "message": message,
    }


def _pod(name: str, role: str) -> dict[str, Any]:
    labels = L.object_labels("chat", "d-1", 1, role)
    return {"metadata": {"name": name, "namespace": NS, "labels": labels}, "status": {}}


def test_events_of_a_split_endpoints_pods_name_the_role() -> None:
    pods = [_pod("chat-decode-a", "decode"), _pod("chat-engine-a", "engine")]
    events = [_event("chat-decode-a", "BackOff", "1"), _event("chat-engine-a", "BackOff", "2")]
    seen = observation(pods, events, "")
    assert [e.message for e in seen.events] == [
        "decode: chat-decode-a: Back-off restarting",
        "chat-engine-a: Back-off restarting",  # a plain engine's line is as it was
    ]


def _group_pod(name: str, rank: int, ready: bool) -> dict[str, Any]:
    """A pod of a two-pod multi-node group as LWS's webhook labels it."""
    labels = L.object_labels("chat", "d-1", 1, "engine")
    labels |= {L.LWS_GROUP_KEY: "g1", L.LWS_WORKER_INDEX: str(rank)}
    container = {"name": "engine", "ready": ready, "started": True, "state": {"running": {}}}
    return {
        "metadata": {"name": name, "namespace": NS, "labels": labels,
                     "annotations": {L.LWS_SIZE: "2"}},
        "spec": {"containers": [{"name": "engine"}]},
        "status": {"phase": "Running", "containerStatuses": [container]},
    }  # fmt: skip


def test_a_group_is_ready_only_once_every_rank_exists_and_is_ready() -> None:
    """LWS creates a group's workers after its leader: a ready leader alone is not a ready
    replica (seen on the real controllers, where the driver counted such a group ready)."""
    leader = _group_pod("chat-engine-0", 0, ready=True)
    (alone,) = observation([leader], [], "").replicas
    assert not alone.ready and "1 of 1 worker pod(s) not created yet" in alone.message
    (waiting,) = observation([leader, _group_pod("chat-engine-0-1", 1, False)], [], "").replicas
    assert not waiting.ready
    (whole,) = observation([leader, _group_pod("chat-engine-0-1", 1, True)], [], "").replicas
    assert whole.ready and whole.name == "chat-engine-0"


def _split(decode: list[bool]) -> status.Facts:
    replicas = [{"name": "p", "role": "prefill", "revision": 1, "ready": True, "phase": "ready"}]
    replicas += [
        {"name": f"d{i}", "role": "decode", "revision": 1, "ready": ready, "phase": "loading"}
        for i, ready in enumerate(decode)
    ]
    ready = 1 + sum(decode)
    return status.Facts(
        desired_state="running", desired_replicas=1, target_revision=1, applied_revision=1,
        current_revision=1, ready_replicas=ready, total_replicas=len(replicas),
        first_ready_at=timezone.now(), **status.replica_counts(replicas, 1),
    )  # fmt: skip


def test_a_pool_short_of_its_replicas_degrades_a_split_endpoint() -> None:
    assert status.derive_status(_split([True, True, True])) == status.ACTIVE
    short = _split([True, False, False])
    assert short.short_pools == ("decode",)
    assert status.derive_status(short) == status.DEGRADED
    assert not status.is_settled(short)


def test_the_timeline_names_the_pool_that_lost_replicas() -> None:
    spec = {"disaggregation": {"enabled": True, "decode": {"replicas": 3}}}
    revision = Revision(number=1, spec=spec)

    def decode(ready: list[bool]) -> Observation:
        replicas = [ReplicaFacts(name="p", revision=1, role="prefill", phase="ready", ready=True)]
        replicas += [
            ReplicaFacts(
                name=f"d{i}", revision=1, role="decode", phase="ready" if up else "failed",
                ready=up, reason="" if up else "CrashLoopBackOff", message="" if up else "exit 1",
            )
            for i, up in enumerate(ready)
        ]  # fmt: skip
        return Observation(replicas=tuple(replicas))

    before = Deployment(replica_facts=[r.as_dict() for r in decode([True] * 3).replicas])
    lines = reconcile._pools_lost(before, decode([True, False, False]), revision)
    assert lines == [("decode", "decode pool: 1/3 replicas ready (CrashLoopBackOff: exit 1)")]
    after = Deployment(replica_facts=[r.as_dict() for r in decode([True, False, False]).replicas])
    assert reconcile._pools_lost(after, decode([True, False, False]), revision) == []  # said once


def test_a_starting_worker_turns_the_caches_on_and_a_stopping_one_off() -> None:
    from deployments.clusters import tasks as worker_hooks

    worker_hooks._watch_clusters()
    try:
        assert registry._on_change is worker_hooks.make_due_from_watch
    finally:
        worker_hooks._stop_watching()
    assert registry._on_change is None and not informer_module._caches
