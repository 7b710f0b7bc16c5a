"""List+watch caches against the API emulator: resume from resourceVersion, relist on 410, stale
until synced, and the driver reading from them (and never deleting on what they say).

Why the emulator (a stand-in, see kube_emulator.py): the server's end of each watch is the test's
to decide (ended every second, a history compacted so the next resume gets 410, a LIST refused with
503 twice), and the tests count the requests (one LIST, a watch naming the version it resumes from,
a settled pass asking nothing). Caches following an endpoint on the real server, with the worker's
token, are tests/kube_real/test_worker_cache_on_real_cluster.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from deployments.drivers.kube import informer as informer_module
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient, KubeGone, kind_of
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.informer import ClusterCache, Informer
from tests.drivers.kube_emulator import CLIENT_TIMEOUT_S, RunningEmulator
from tests.drivers.reference_specs import REF, load_spec, revision_plan
from tests.waiting import wait_until

NS = REF.namespace
PODS = kind_of("v1", "Pod")


@pytest.fixture
def client(emulator: RunningEmulator) -> Iterator[KubeClient]:
    client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
    yield client
    client.close()


def pod(name: str, owner: str = REF.id, phase: str = "Running") -> dict[str, Any]:
    labels = L.object_labels(REF.slug, owner, 1, "engine")
    container = {"name": "engine", "image": "x"}
    return {
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [container]},
        "status": {"phase": phase},
    }


def started(informer: Informer) -> Informer:
    informer.start()
    assert informer.wait_synced(10)
    return informer


def phase_of(informer: Informer, name: str) -> str | None:
    obj = informer.get(NS, name)
    return None if obj is None else obj["status"]["phase"]


def test_a_list_then_a_watch_keeps_the_cache_as_the_api_is(
    client: KubeClient, emulator: RunningEmulator
) -> None:
    emulator.put("v1", "Pod", NS, pod("a"))
    emulator.put("v1", "Pod", NS, pod("foreign", owner="someone-else"))
    informer = started(Informer(client, PODS, NS, selector=L.owner_selector(REF.id), watch_s=5))
    try:
        assert [p["metadata"]["name"] for p in informer.list(NS)] == ["a"]
        emulator.put("v1", "Pod", NS, pod("b", phase="Pending"))
        wait_until(lambda: phase_of(informer, "b") == "Pending", "b added")
        emulator.put("v1", "Pod", NS, pod("b"))
        wait_until(lambda: phase_of(informer, "b") == "Running", "b modified")
        client.delete(PODS, NS, "a")
        wait_until(lambda: informer.get(NS, "a") is None, "a deleted")
        assert informer.lists == 1
    finally:
        informer.stop()


def test_a_watch_the_server_ends_resumes_from_its_version_without_listing(
    client: KubeClient, emulator: RunningEmulator
) -> None:
    informer = started(Informer(client, PODS, NS, watch_s=1))
    try:
        wait_until(lambda: informer.watches >= 3, "the watch resumed twice")
        emulator.put("v1", "Pod", NS, pod("late"))
        wait_until(lambda: informer.get(NS, "late") is not None, "late seen")
        assert informer.lists == 1
        resumed = [
            r.params.get("resourceVersion")
            for r in list(emulator.emulator._requests)
            if r.params.get("watch") == "true"
        ]
        assert all(resumed) and resumed[0] != ""  # every watch names the version it resumes
    finally:
        informer.stop()


def test_a_version_the_server_no_longer_keeps_is_listed_again(
    client: KubeClient, emulator: RunningEmulator
) -> None:
    emulator.put("v1", "Pod", NS, pod("a"))
    informer = started(Informer(client, PODS, NS, watch_s=1))
    try:
        # Another kind moves the version on, then the history is compacted: the pod watch's
        # version is too old when it resumes (a 410 ERROR event).
        emulator.put("v1", "Service", NS, {"metadata": {"name": "s", "namespace": NS}})
        emulator.call(emulator.emulator.compact)
        wait_until(lambda: informer.lists >= 2, "listed again after 410")
        # An HTTP 410 on the watch request itself relists too.
        emulator.inject("GET", f"/namespaces/{NS}/pods", 410)
        wait_until(lambda: informer.lists >= 3, "listed again after HTTP 410")
        emulator.put("v1", "Pod", NS, pod("after"))
        wait_until(lambda: informer.get(NS, "after") is not None, "watching again")
        assert informer.get(NS, "a") is not None
    finally:
        informer.stop()


def test_gone_is_raised_for_a_too_old_version(
    client: KubeClient, emulator: RunningEmulator
) -> None:
    emulator.put("v1", "Pod", NS, pod("a"))
    emulator.put("v1", "Pod", NS, pod("b"))
    emulator.call(emulator.emulator.compact)
    with pytest.raises(KubeGone):
        list(client.watch(PODS, NS, "1", timeout_s=1))


def test_a_cache_that_cannot_list_stays_stale_and_retries(
    client: KubeClient, emulator: RunningEmulator
) -> None:
    emulator.inject("GET", f"/namespaces/{NS}/pods", 503, times=2)
    informer = Informer(client, PODS, NS, watch_s=5, backoff_s=(0.05, 0.1)).start()
    try:
        assert not informer.synced  # not listed yet: readers go to the API
        assert informer.wait_synced(10)
        assert informer.lists == 1
    finally:
        informer.stop()


def plan(number: int = 1, name: str = "llama-3.1-8b-h100") -> Any:
    return revision_plan(load_spec(name), number=number)


@pytest.fixture
def cache(emulator: RunningEmulator) -> Iterator[ClusterCache]:
    cache = ClusterCache(KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S), NS).start()
    for informer in cache.informers.values():
        assert informer.wait_synced(10)
    yield cache
    cache.stop()


def test_a_settled_pass_read_from_the_cache_asks_the_api_nothing(
    client: KubeClient, emulator: RunningEmulator, cache: ClusterCache
) -> None:
    driver = KubeDriver(client, cache=cache)
    driver.apply(REF, plan())
    emulator.put("v1", "Pod", NS, pod("chat-engine-0"))
    wait_until(lambda: cache.informers["Pod"].get(NS, "chat-engine-0") is not None, "pod seen")
    anchor = cache.informers["Service"]
    wait_until(lambda: L.SET_HASH in _annotations(anchor.get(NS, "chat-router")), "anchor seen")
    start = len(emulator.emulator._requests)
    seen = driver.observe(REF)
    driver.apply(REF, plan())
    assert [r.name for r in seen.replicas] == ["chat-engine-0"]
    asked = [
        r for r in list(emulator.emulator._requests)[start:] if r.params.get("watch") != "true"
    ]
    assert asked == []


def test_a_stale_cache_is_not_read_and_never_deletes(
    client: KubeClient, emulator: RunningEmulator, cache: ClusterCache
) -> None:
    driver = KubeDriver(client, cache=cache)
    driver.apply(REF, plan(1))
    services = cache.informers["Service"]
    wait_until(lambda: L.SET_HASH in _annotations(services.get(NS, "chat-router")), "seen")
    for informer in cache.informers.values():
        informer.stop()
        informer._synced.clear()  # as after a failed watch
    # The stale cache still holds revision 1's anchor hash; the API is read instead, so the
    # change lands, and prune deletes only what a direct LIST returned.
    start = len(emulator.emulator._requests)
    driver.apply(REF, plan(2, "deepseek-v3-tp16-2x-h200"))
    gets = [(r.method.value, r.url.path) for r in list(emulator.emulator._requests)[start:]]
    assert ("GET", f"/api/v1/namespaces/{NS}/services/chat-router") in gets
    assert emulator.get("apps/v1", "Deployment", NS, "chat-engine") is None
    assert driver.observe(REF).replicas == ()  # read from the API: no pods there


def _annotations(obj: dict[str, Any] | None) -> dict[str, str]:
    return ((obj or {}).get("metadata") or {}).get("annotations") or {}


def test_a_worker_keeps_one_cache_per_cluster_and_replaces_it_when_its_access_changes(
    emulator: RunningEmulator,
) -> None:
    built: list[ClusterCache] = []

    def build() -> ClusterCache:
        client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
        built.append(ClusterCache(client, NS, watch_s=1))
        return built[-1]

    try:
        first = informer_module.cache_for(("cluster-1", "config-a"), build)
        assert informer_module.cache_for(("cluster-1", "config-a"), build) is first
        second = informer_module.cache_for(("cluster-1", "config-b"), build)
        assert second is not first and len(built) == 2
        assert all(i._stop.is_set() for i in first.informers.values())
    finally:
        informer_module.stop_all()


def test_a_relist_reports_what_changed_while_no_watch_was_open() -> None:
    def obj(name: str, version: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": NS, "resourceVersion": version}}

    before = {(NS, "same"): obj("same", "1"), (NS, "moved"): obj("moved", "1"),
              (NS, "gone"): obj("gone", "1")}  # fmt: skip
    after = {(NS, "same"): obj("same", "1"), (NS, "moved"): obj("moved", "5"),
             (NS, "new"): obj("new", "6")}  # fmt: skip
    changes = informer_module._differences(before, after)
    assert sorted((c, o["metadata"]["name"]) for c, o in changes) == [
        ("ADDED", "new"), ("DELETED", "gone"), ("MODIFIED", "moved"),
    ]  # fmt: skip
