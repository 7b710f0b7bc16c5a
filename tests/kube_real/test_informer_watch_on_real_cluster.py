"""Watch semantics of the worker's caches on a real API server: its bookmarks move a quiet kind's
version on, and a version etcd compacted away (410 Gone) makes the informer list again, after
which its cache holds what the server holds.

Which kinds 410 when is the server's choice: most kinds are watched from the API server's watch
cache, which keeps its own window of versions whatever etcd compacts, while Events are watched
from etcd itself (Kubernetes keeps no watch cache of them), so a compaction expires their
version. The restart of the API server, which expires every cached kind's, is
test_worker_cache_across_api_server_restart.py's.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.informer import ClusterCache, Informer
from tests.kube_real.conftest import LOOPBACK, SETTLE_S, Admin
from tests.kube_real.control_plane import ControlPlane
from tests.waiting import wait_until


def _selectors(informer: Informer) -> str:
    parts = []
    if informer.selector:
        labels = ",".join(f"{k}={v}" for k, v in sorted(informer.selector.items()))
        parts.append(f"labelSelector={labels}")
    if informer.fields:
        parts.append(f"fieldSelector={informer.fields}")
    return "?" + "&".join(parts) if parts else ""


def server_state(admin: Admin, informer: Informer) -> dict[tuple[str, str], str]:
    """What the server holds of ``informer``'s kind, namespace and selectors: (namespace, name)
    -> resourceVersion, listed by the admin."""
    path = informer.kind.path(informer.namespace) + _selectors(informer)
    items = admin.call("GET", path).get("items") or []
    return {_key(o): o["metadata"]["resourceVersion"] for o in items}


def cached_state(informer: Informer) -> dict[tuple[str, str], str]:
    return {_key(o): o["metadata"]["resourceVersion"] for o in informer.all()}


def holds_what_the_server_holds(admin: Admin, informer: Informer) -> bool:
    """Synced, and the same objects at the same versions as a fresh list of the server's."""
    return informer.synced and cached_state(informer) == server_state(admin, informer)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def pod_event(namespace: str, pod: str, reason: str) -> dict[str, Any]:
    """An Event about a pod, as the scheduler or a kubelet writes one."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod}.{uuid.uuid4().hex[:8]}", "namespace": namespace},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": namespace},
        "reason": reason,
        "message": f"{reason} for {pod}",
        "type": "Normal",
        "source": {"component": "plinth-test"},
    }


@pytest.fixture
def cache(worker_kubeconfig: str, namespace: str) -> Iterator[ClusterCache]:
    client = KubeClient.from_kubeconfig(worker_kubeconfig, policy=LOOPBACK)
    # Watches the server ends every few seconds, each resumed from the version last seen.
    cache = ClusterCache(client, namespace, has_lws=False, watch_s=3)
    yield cache
    cache.stop()


def synced(cache: ClusterCache) -> None:
    for kind, informer in cache.informers.items():
        assert informer.wait_synced(SETTLE_S), f"the {kind} cache syncs"


def test_a_quiet_kinds_version_follows_the_servers_bookmarks(
    cache: ClusterCache, admin: Admin, namespace: str
) -> None:
    """The namespace holds no Service of Plinth's: without bookmarks the Service cache would keep
    its list's version, which the server forgets in time (410, then a relist at every resume)."""
    told: list[set[str]] = []
    cache.on_change(told.append, debounce_s=0.1)
    cache.start()
    synced(cache)
    services = cache.informers["Service"]
    listed = services.version
    # Someone else's Service: the server's version moves on, no object the cache selects does.
    foreign = {
        "metadata": {"name": "someone-elses"},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "other"}},
    }
    admin.call("POST", f"/api/v1/namespaces/{namespace}/services", foreign)
    # Versions are opaque to clients; on an etcd-backed server they are etcd's revisions.
    wait_until(
        lambda: services.bookmarks and int(services.version) > int(listed),
        "a bookmark moves the version on",
        SETTLE_S,
        interval=0.2,
    )
    assert services.lists == 1  # resumed from the bookmark's version, never listed again
    assert len(services) == 0
    assert not told  # a bookmark is no change


def test_a_version_compacted_away_is_listed_again_and_the_cache_is_the_servers(
    cache: ClusterCache, admin: Admin, namespace: str, cluster: ControlPlane
) -> None:
    events = cache.informers["Event"]
    cache.start()
    synced(cache)
    path = f"/api/v1/namespaces/{namespace}/events"
    first = admin.call("POST", path, pod_event(namespace, "chat-engine-0", "Scheduled"))
    wait_until(lambda: events.get(namespace, first["metadata"]["name"]), "the cache has it")
    # Writes elsewhere, then etcd forgets every version before them: the Event watch, which
    # resumes every few seconds from the version of the last event it saw, is answered 410.
    for n in range(2):
        admin.call(
            "POST", f"/api/v1/namespaces/{namespace}/configmaps", {"metadata": {"name": f"c{n}"}}
        )
    cluster.compact_etcd()
    wait_until(lambda: events.lists >= 2, "listed again after 410 Gone", SETTLE_S, interval=0.2)
    second = admin.call("POST", path, pod_event(namespace, "chat-engine-0", "Pulled"))
    admin.call("DELETE", f"{path}/{first['metadata']['name']}")
    wait_until(
        lambda: holds_what_the_server_holds(admin, events),
        "the Event cache holds what the server holds",
        SETTLE_S,
        interval=0.5,
    )
    assert (namespace, second["metadata"]["name"]) in cached_state(events)
    # The kinds the watch cache serves never noticed the compaction.
    wait_until(
        lambda: all(holds_what_the_server_holds(admin, i) for i in cache.informers.values()),
        "every cache holds what the server holds",
        SETTLE_S,
        interval=0.5,
    )
    assert all(i.lists == 1 for k, i in cache.informers.items() if k != "Event")
