"""The Kubernetes driver against the API emulator, through the official client.

Why the emulator (a stand-in, see kube_emulator.py), not tests/kube_real: these tests assert what
the driver sends, which a real API server does not show a test (a no-op apply leaves an object's
resourceVersion as it was): server-side apply PATCHes only, as ``plinth``, forced only where it
adopts; one read and no write for a settled endpoint; no second round of deletes; no request at all
to a refused address. They inject exact failures (a 503 between apply and prune, 409/429/5xx,
403/422, a stall past the client's timeout, a reply whose body and reason are not the API's, a 200
that is no JSON), remove a kind (LeaderWorkerSet) mid-session, and write pod states, events,
container logs (kwok's nodes serve none) and pod addresses that no real component produces on
demand. The same paths on the real server (objects accepted, a second pass that writes nothing,
stop and start, delete with garbage collection, every call authenticated by the worker's token
under RBAC) are in tests/kube_real/test_endpoint_on_real_cluster.py and
test_worker_rbac_on_real_cluster.py.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deployments.drivers import base
from deployments.drivers.errors import DriverError, ForeignObjectError
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import (
    KubeClient,
    KubePermanentError,
    KubeTemporaryError,
    kind_of,
)
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.egress import EgressPolicy
from deployments.drivers.kube.kubeconfig import KubeconfigPolicy
from tests.drivers.kube_emulator import (
    CLIENT_TIMEOUT_S,
    STALL_SECONDS,
    RunningEmulator,
)
from tests.drivers.reference_specs import REF, load_spec, revision_plan

NS = REF.namespace


@pytest.fixture
def driver(emulator: RunningEmulator) -> Iterator[KubeDriver]:
    client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
    yield KubeDriver(client)
    client.close()


def plan(number: int = 1, name: str = "llama-3.1-8b-h100") -> base.RevisionPlan:
    return revision_plan(load_spec(name), number=number)


def test_create_applies_every_object_server_side_as_plinth(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    driver.apply(REF, plan())
    writes = emulator.writes()
    assert writes and all(method == "PATCH" for method, _ in writes)
    requests = [r for r in emulator.emulator._requests if r.method.value == "PATCH"]
    assert all(r.params.get("fieldManager") == "plinth" for r in requests)
    assert all("force" not in r.params for r in requests)  # new objects: nothing to force
    engine = emulator.get("apps/v1", "Deployment", NS, "chat-engine")
    assert engine is not None
    assert engine["metadata"]["labels"][L.MANAGED_BY] == "plinth"
    assert emulator.get("v1", "Service", NS, "chat-router") is not None
    assert emulator.get("rbac.authorization.k8s.io/v1", "Role", NS, "chat-router") is not None


def test_reapplying_an_unchanged_revision_writes_nothing(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    driver.apply(REF, plan())
    before = len(emulator.writes())
    driver.apply(REF, plan())
    assert len(emulator.writes()) == before


def requests_since(emulator: RunningEmulator, start: int) -> list[tuple[str, str]]:
    return [(r.method.value, r.url.path) for r in list(emulator.emulator._requests)[start:]]


def test_a_settled_endpoint_costs_one_read_and_no_write(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    driver.apply(REF, plan())
    start = len(emulator.emulator._requests)
    driver.apply(REF, plan())
    # The anchor (the router Service, rendered last) carries the set hash: nothing else is read.
    assert requests_since(emulator, start) == [
        ("GET", f"/api/v1/namespaces/{NS}/services/chat-router")
    ]
    anchor = emulator.get("v1", "Service", NS, "chat-router")
    assert anchor is not None and anchor["metadata"]["annotations"][L.SET_HASH]


def test_without_the_skip_every_object_is_read_and_pruned_each_pass(
    emulator: RunningEmulator,
) -> None:
    client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
    old = KubeDriver(client, skip_unchanged=False)
    old.apply(REF, plan())
    start = len(emulator.emulator._requests)
    old.apply(REF, plan())
    seen = requests_since(emulator, start)
    client.close()
    assert all(method == "GET" for method, _ in seen) and len(seen) > 10


def test_a_pass_that_dies_before_pruning_prunes_on_the_next(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    driver.apply(REF, plan(1))
    emulator.inject("DELETE", "/deployments/chat-engine", 503)  # the old Deployment's prune
    with pytest.raises(KubeTemporaryError):
        driver.apply(REF, plan(2, "deepseek-v3-tp16-2x-h200"))
    assert emulator.get("apps/v1", "Deployment", NS, "chat-engine") is not None
    driver.apply(REF, plan(2, "deepseek-v3-tp16-2x-h200"))  # the anchor still had the old hash
    assert emulator.get("apps/v1", "Deployment", NS, "chat-engine") is None


def test_a_changed_rendering_is_applied_although_the_anchor_is_unchanged(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    driver.apply(REF, plan(1))
    first = emulator.get("v1", "Service", NS, "chat-router")
    driver.apply(REF, plan(2, "llama-3.1-8b-ngram-h100"))
    engine = emulator.get("apps/v1", "Deployment", NS, "chat-engine")
    second = emulator.get("v1", "Service", NS, "chat-router")
    assert (
        engine is not None
        and "NGRAM" in engine["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert first is not None and second is not None
    assert (
        first["metadata"]["annotations"][L.SET_HASH]
        != second["metadata"]["annotations"][L.SET_HASH]
    )


def test_a_new_revision_updates_the_pod_template(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    driver.apply(REF, plan(1))
    driver.apply(REF, plan(2, "llama-3.1-8b-ngram-h100"))
    engine = emulator.get("apps/v1", "Deployment", NS, "chat-engine")
    assert engine is not None
    assert engine["spec"]["template"]["metadata"]["labels"][L.REVISION] == "2"
    assert "NGRAM" in engine["spec"]["template"]["spec"]["containers"][0]["args"]
    forced = [r for r in emulator.emulator._requests if r.params.get("force") == "true"]
    assert forced  # our own objects: field conflicts are forced


def test_delete_removes_everything_and_again_is_done(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    driver.apply(REF, plan())
    assert driver.delete(REF) is True
    assert emulator.get("apps/v1", "Deployment", NS, "chat-engine") is None
    assert emulator.get("v1", "ServiceAccount", NS, "chat-router") is None
    deletes = len(emulator.writes())
    assert driver.delete(REF) is True
    assert len(emulator.writes()) == deletes


def test_deleting_a_missing_object_is_success(driver: KubeDriver) -> None:
    assert driver.client.delete(kind_of("v1", "Service"), NS, "never-existed") is True


def test_existing_objects_of_this_endpoint_are_adopted(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    # Left by an earlier worker that died before it finished (no config hash yet).
    labels = L.object_labels(REF.slug, REF.id, 1, "engine")
    meta = {"name": "chat-engine", "namespace": NS, "labels": labels}
    emulator.put("v1", "Service", NS, {"metadata": meta, "spec": {"ports": []}})
    driver.apply(REF, plan())
    service = emulator.get("v1", "Service", NS, "chat-engine")
    assert service is not None and service["spec"]["ports"][0]["port"] == 30000
    patch = next(
        r
        for r in emulator.emulator._requests
        if r.method.value == "PATCH" and r.url.path.endswith("services/chat-engine")
    )
    assert patch.params.get("force") == "true"


def test_foreign_objects_are_refused_and_never_written(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    meta = {"name": "chat-engine", "namespace": NS, "labels": {"app": "someone-else"}}
    emulator.put("v1", "Service", NS, {"metadata": meta, "spec": {"ports": []}})
    emulator.put("apps/v1", "Deployment", NS, {"metadata": meta, "spec": {}})
    with pytest.raises(ForeignObjectError, match="not managed by Plinth"):
        driver.apply(REF, plan())
    assert not any("chat-engine" in path for _, path in emulator.writes())
    assert driver.delete(REF) is True
    assert emulator.get("v1", "Service", NS, "chat-engine") is not None


@pytest.mark.parametrize("status", [409, 429, 500, 503])
def test_transient_api_errors_are_temporary(
    driver: KubeDriver, emulator: RunningEmulator, status: int
) -> None:
    emulator.inject("PATCH", "deployments/chat-engine", status)
    with pytest.raises(KubeTemporaryError) as raised:
        driver.apply(REF, plan())
    assert raised.value.status == status
    driver.apply(REF, plan())  # the retry succeeds
    assert emulator.get("apps/v1", "Deployment", NS, "chat-engine") is not None


@pytest.mark.parametrize("status", [403, 422])
def test_forbidden_and_invalid_are_permanent(
    driver: KubeDriver, emulator: RunningEmulator, status: int
) -> None:
    emulator.inject("PATCH", "deployments/chat-engine", status)
    with pytest.raises(KubePermanentError, match=f"Kubernetes API {status}"):
        driver.apply(REF, plan())


def test_a_stalled_api_is_a_temporary_timeout(emulator: RunningEmulator) -> None:
    client = KubeClient.for_host(emulator.url, timeout=STALL_SECONDS / 3)
    emulator.inject("GET", "deployments/chat-engine", None)
    with pytest.raises(KubeTemporaryError, match="did not answer"):
        KubeDriver(client).apply(REF, plan())
    client.close()


def pod(name: str, revision: int, status: dict[str, Any], role: str = "engine") -> dict[str, Any]:
    labels = L.object_labels(REF.slug, REF.id, revision, role)
    container = {"name": role, "image": "x", "ports": [{"containerPort": 30000}]}
    return {
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [container]},
        "status": status,
    }


def running(ready: bool, **container: Any) -> dict[str, Any]:
    state = {"running": {}} if ready else container.pop("state", {"running": {}})
    status = {"name": "engine", "ready": ready, "restartCount": 0, "state": state, **container}
    return {"phase": "Running", "podIP": "10.0.0.7", "containerStatuses": [status]}


def test_observe_maps_pods_to_replica_facts(driver: KubeDriver, emulator: RunningEmulator) -> None:
    driver.apply(REF, plan())
    unschedulable = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    }
    crash = running(
        False,
        restartCount=4,
        state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
        lastState={"terminated": {"reason": "OOMKilled", "exitCode": 137}},
    )
    pull = running(False, state={"waiting": {"reason": "ImagePullBackOff", "message": "not found"}})
    emulator.put("v1", "Pod", NS, pod("chat-engine-a", 1, running(True)))
    emulator.put("v1", "Pod", NS, pod("chat-engine-b", 1, unschedulable))
    emulator.put("v1", "Pod", NS, pod("chat-engine-c", 1, crash))
    emulator.put("v1", "Pod", NS, pod("chat-engine-d", 2, pull))
    emulator.put("v1", "Pod", NS, pod("chat-engine-e", 2, running(False, started=False)))
    router = running(True)
    router["containerStatuses"][0]["name"] = "router"
    emulator.put("v1", "Pod", NS, pod("chat-router-x", 1, router, role="router"))
    seen = {r.name: r for r in driver.observe(REF).replicas}
    assert seen["chat-engine-a"].ready and seen["chat-engine-a"].url == "http://10.0.0.7:30000"
    assert (seen["chat-engine-b"].phase, seen["chat-engine-b"].reason) == (
        "pending",
        "Unschedulable",
    )
    assert "Insufficient nvidia.com/gpu" in seen["chat-engine-b"].message
    assert (seen["chat-engine-c"].reason, seen["chat-engine-c"].restarts) == ("OOMKilled", 4)
    assert seen["chat-engine-d"].reason == "ImagePullBackOff"
    assert seen["chat-engine-d"].revision == 2
    assert seen["chat-engine-e"].phase == "loading"
    observed = driver.observe(REF)
    assert observed.ready_count() == 1 and observed.router_ready
    assert observed.router_url == "http://chat-router.team-a.svc:8000"


def test_observe_reports_probe_failures_and_events(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    emulator.put("v1", "Pod", NS, pod("chat-engine-a", 1, running(False, started=True)))
    event = {
        "metadata": {"name": "chat-engine-a.1", "namespace": NS, "uid": "e1"},
        "involvedObject": {"kind": "Pod", "name": "chat-engine-a", "namespace": NS},
        "reason": "Unhealthy",
        "type": "Warning",
        "message": "Readiness probe failed: HTTP probe failed with statuscode: 503",
        "count": 3,
    }
    other = {**event, "metadata": {"name": "x.1", "namespace": NS, "uid": "e2"}}
    other["involvedObject"] = {"kind": "Pod", "name": "someone-elses-pod", "namespace": NS}
    emulator.put("v1", "Event", NS, event)
    emulator.put("v1", "Event", NS, other)
    observed = driver.observe(REF)
    replica = observed.replicas[0]
    assert (replica.phase, replica.reason) == ("running", "ProbeFailed")
    assert "statuscode: 503" in replica.message
    assert [e.reason for e in observed.events] == ["Unhealthy"]
    assert observed.events[0].level == "warning"


def log_requests(emulator: RunningEmulator) -> list[dict[str, str]]:
    return [dict(r.params) for r in emulator.emulator._requests if r.url.path.endswith("/log")]


def test_logs_read_the_pod_log_with_times_and_list_every_pod(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    emulator.put("v1", "Pod", NS, pod("chat-engine-a", 1, running(True)))
    emulator.put("v1", "Pod", NS, pod("chat-router-a", 1, running(True), role="router"))
    at = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
    emulator.write_log(NS, "chat-engine-a", "engine", ["loading weights", "ready"], at=at)
    emulator.write_log(NS, "chat-router-a", "router", ["router up --api-key sk-abc"], at=at)
    found = driver.logs(REF, base.LogQuery())
    assert found.replica == "chat-engine-a"
    assert [(line.text, line.ts) for line in found.lines] == [
        ("loading weights", at),
        ("ready", at + timedelta(microseconds=1)),
    ]
    assert [(s.name, s.role) for s in found.replicas] == [
        ("chat-engine-a", "engine"),
        ("chat-router-a", "router"),
    ]
    [asked] = log_requests(emulator)
    assert asked["container"] == "engine" and asked["timestamps"] == "true"
    assert asked["tailLines"] == "200" and int(asked["limitBytes"]) == base.LOG_READ_BYTES
    router = driver.logs(REF, base.LogQuery(role="router"))
    assert [line.text for line in router.lines] == ["router up --api-key ***"]
    assert log_requests(emulator)[-1]["container"] == "router"
    # A name the driver does not list is never asked for.
    before = len(log_requests(emulator))
    assert driver.logs(REF, base.LogQuery(replica="../kube-system/etcd")).replica == ""
    assert len(log_requests(emulator)) == before
    fallback = driver.logs(REF, base.LogQuery(replica="chat-engine-gone", fallback=True))
    assert fallback.replica == "chat-engine-a"


def test_the_previous_container_of_a_crash_looping_pod_is_read(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    crashed = running(
        False,
        state={"waiting": {"reason": "CrashLoopBackOff"}},
        restartCount=3,
        lastState={"terminated": {"exitCode": 1, "reason": "Error"}},
    )
    emulator.put("v1", "Pod", NS, pod("chat-engine-a", 1, crashed))
    emulator.put("v1", "Pod", NS, pod("chat-engine-b", 1, running(True)))
    emulator.write_log(NS, "chat-engine-a", "engine", ["starting again"])
    emulator.write_log(
        NS, "chat-engine-a", "engine", ["torch.OutOfMemoryError: CUDA out of memory"], previous=True
    )
    emulator.write_log(NS, "chat-engine-b", "engine", ["serving"])
    current = driver.logs(REF, base.LogQuery())
    assert [line.text for line in current.lines] == ["starting again"]
    assert current.source == base.LogSource("chat-engine-a", "engine", 3, has_previous=True)
    previous = driver.logs(REF, base.LogQuery(previous=True))
    assert [line.text for line in previous.lines] == ["torch.OutOfMemoryError: CUDA out of memory"]
    assert log_requests(emulator)[-1]["previous"] == "true"
    # A container that never restarted has no previous run: not asked (the API would say 400).
    before = len(log_requests(emulator))
    none = driver.logs(REF, base.LogQuery(replica="chat-engine-b", previous=True))
    assert none.replica == "chat-engine-b" and none.lines == []
    assert none.source is not None and not none.source.has_previous
    assert len(log_requests(emulator)) == before
    with pytest.raises(KubePermanentError) as refused:
        driver.client.pod_log(NS, "chat-engine-b", container="engine", previous=True)
    assert refused.value.status == 400


def test_a_container_that_has_not_started_has_no_log_yet(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    pulling = running(False, state={"waiting": {"reason": "ContainerCreating"}})
    emulator.put("v1", "Pod", NS, pod("chat-engine-a", 1, pulling))
    found = driver.logs(REF, base.LogQuery())
    assert found.replica == "chat-engine-a" and found.lines == []
    assert not log_requests(emulator)  # the API would refuse it: 400, waiting to start
    with pytest.raises(KubePermanentError) as refused:
        driver.client.pod_log(NS, "chat-engine-a", container="engine")
    assert refused.value.status == 400


def test_following_a_pod_log_returns_each_line_once(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    emulator.put("v1", "Pod", NS, pod("chat-engine-a", 1, running(True)))
    at = datetime.now(UTC).replace(microsecond=0)
    emulator.write_log(NS, "chat-engine-a", "engine", ["one", "two"], at=at)
    first = driver.logs(REF, base.LogQuery())
    assert [line.text for line in first.lines] == ["one", "two"] and not first.continued
    nothing = driver.logs(REF, base.LogQuery(after=first.cursor))
    assert nothing.lines == [] and nothing.continued and nothing.cursor == first.cursor
    # Later lines in the same second: the API's sinceTime repeats that second; we do not.
    emulator.write_log(
        NS,
        "chat-engine-a",
        "engine",
        ["three", "four", "five"],
        at=at + timedelta(microseconds=500),
    )
    following = driver.logs(REF, base.LogQuery(after=first.cursor, tail=2))
    assert [line.text for line in following.lines] == ["three", "four"] and following.more
    assert log_requests(emulator)[-1]["sinceTime"] == at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert "tailLines" not in log_requests(emulator)[-1]  # after a cursor: the oldest first
    rest = driver.logs(REF, base.LogQuery(after=following.cursor, tail=2))
    assert [line.text for line in rest.lines] == ["five"] and not rest.more
    since = driver.logs(REF, base.LogQuery(since=at + timedelta(microseconds=2)))
    assert [line.text for line in since.lines] == ["three", "four", "five"]


def test_without_the_lws_crd_multi_node_is_refused_and_the_rest_works(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    emulator.uninstall("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet")
    with pytest.raises(KubePermanentError, match="needs LeaderWorkerSet"):
        driver.apply(REF, plan(name="deepseek-v3-tp16-2x-h200"))
    driver.apply(REF, plan())  # single-node endpoints do not need it
    assert driver.delete(REF) is True


def test_objects_a_new_revision_no_longer_renders_are_removed(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    driver.apply(REF, plan(1))
    driver.apply(REF, plan(2, "deepseek-v3-tp16-2x-h200"))  # one replica now spans two nodes
    assert emulator.get("apps/v1", "Deployment", NS, "chat-engine") is None
    lws = emulator.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", NS, "chat-engine")
    assert lws is not None and lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert emulator.get("apps/v1", "Deployment", NS, "chat-router") is not None


SENTINEL = "SENTINEL-7f3a-upstream-said-this"


@pytest.mark.parametrize("status", [400, 401, 403, 404, 418, 422, 500, 503])
def test_what_an_api_server_replies_never_reaches_the_error(
    driver: KubeDriver, emulator: RunningEmulator, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    body = f'{{"kind": "Status", "message": "{SENTINEL}", "reason": "{SENTINEL}"}}'
    emulator.inject("PATCH", "deployments/chat-engine", status, body=body, reason=SENTINEL)
    with caplog.at_level(logging.DEBUG), pytest.raises(DriverError) as raised:
        driver.apply(REF, plan())
    error = raised.value
    assert error.status == status
    assert error.message.startswith(f"Kubernetes API {status}: ")
    assert SENTINEL not in str(error) and SENTINEL not in caplog.text
    # Nothing chained either: a traceback in a worker's log would print the cause.
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__


def test_a_reply_that_is_not_a_kubernetes_object_is_an_error(
    driver: KubeDriver, emulator: RunningEmulator
) -> None:
    emulator.inject("GET", "deployments/chat-engine", 200, body=f"<html>{SENTINEL}</html>")
    with pytest.raises(KubePermanentError) as raised:
        driver.apply(REF, plan())
    assert SENTINEL not in raised.value.message


def test_a_guarded_client_never_connects_to_a_name_that_resolves_to_loopback(
    emulator: RunningEmulator,
) -> None:
    # The same emulator, named "localhost": resolved when the socket opens, refused there.
    named = emulator.url.replace("127.0.0.1", "localhost")
    client = KubeClient.for_host(named, timeout=CLIENT_TIMEOUT_S, egress=EgressPolicy())
    with pytest.raises(KubePermanentError, match="resolves to an address that is a loopback"):
        client.get(kind_of("v1", "Service"), NS, "chat-router")
    client.close()
    assert not emulator.emulator._requests  # nothing reached the server
    # Allowed by the operator, the guarded client connects to the address it checked.
    allowed = EgressPolicy.build(allow=["127.0.0.0/8", "::1"])
    client = KubeClient.for_host(named, timeout=CLIENT_TIMEOUT_S, egress=allowed)
    assert client.get(kind_of("v1", "Service"), NS, "chat-router") is None
    client.close()
    assert emulator.emulator._requests


def test_a_kubeconfig_client_is_guarded(emulator: RunningEmulator) -> None:
    text = (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{emulator.url}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    with pytest.raises(KubePermanentError, match="loopback address"):
        KubeClient.from_kubeconfig(text, policy=KubeconfigPolicy(allow_http=True))
    allowed = KubeconfigPolicy(allow_http=True, egress=EgressPolicy.build(allow=["127.0.0.1"]))
    client = KubeClient.from_kubeconfig(text, policy=allowed)
    assert client.get(kind_of("v1", "Service"), NS, "chat-router") is None
    client.close()


@pytest.mark.parametrize(
    ("pod_ip", "url"),
    [
        ("10.0.0.7", "http://10.0.0.7:30000"),
        ("fd00::5", "http://[fd00::5]:30000"),
        ("127.0.0.1", ""),
        ("169.254.169.254", ""),
        ("::ffff:127.0.0.1", ""),
        ("fe80::1", ""),
        ("metadata.google.internal", ""),
        ("10.0.0.7/evil#", ""),
    ],
)
def test_the_probe_is_never_pointed_at_an_address_the_cluster_should_not_name(
    driver: KubeDriver, emulator: RunningEmulator, pod_ip: str, url: str
) -> None:
    # The cluster reports pod addresses, and its admin can write them: the probe calls them.
    emulator.put("v1", "Pod", NS, pod("chat-engine-a", 1, {**running(True), "podIP": pod_ip}))
    [replica] = driver.observe(REF).replicas
    assert replica.url == url


def test_a_name_is_resolved_once_per_connection_and_the_checked_address_is_used(
    emulator: RunningEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DNS is the seam here: no name server the test controls exists, so the resolver is
    # replaced by one that rebinds, answering the emulator's address first and the metadata
    # service afterwards. Every other lookup goes to the real resolver.
    real = socket.getaddrinfo
    answers = iter(["127.0.0.1", "169.254.169.254", "169.254.169.254"])
    asked: list[str] = []

    def rebinding(host: str, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "api.rebind.test":
            asked.append(host)
            return real(next(answers), port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    named = emulator.url.replace("127.0.0.1", "api.rebind.test")
    egress = EgressPolicy.build(allow=["127.0.0.1"])
    client = KubeClient.for_host(named, timeout=CLIENT_TIMEOUT_S, egress=egress)
    assert client.get(kind_of("v1", "Service"), NS, "chat-router") is None  # reached the emulator
    assert asked == ["api.rebind.test"]  # and the connection did not look the name up again
    client.close()  # the next connection resolves afresh, gets the metadata address: refused
    with pytest.raises(KubePermanentError, match="cloud metadata"):
        client.get(kind_of("v1", "Service"), NS, "chat-router")
