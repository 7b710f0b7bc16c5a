"""A stand-in for the Kubernetes API server (kmock's emulator, with its gaps filled): never the
real thing, and never to be called real.

It stores objects and answers the API's HTTP calls, so Plinth's client and the official one are
exercised over real HTTP; but nothing behind it acts. No controllers (a Deployment makes no
pods, a Job never finishes), no scheduler, no kubelet, no admission defaults or validation, no
authentication or RBAC, no garbage collection: whatever pods, statuses and logs a test needs,
the test writes. So what it shows about Kubernetes itself is only what our own test code says.

Use it only where the real API server (tests/kube_real: etcd, kube-apiserver, the controllers,
the scheduler and kwok's nodes, started per session) cannot be made to misbehave or be observed
as the test needs:
- an exact failure on one call (``inject``: any HTTP status, a stall past the client's
  timeout, a body or reason phrase that is not the API's, a 410 after ``compact``), a kind that
  is not served (``uninstall``), a watch ended or a history compacted when the test says;
- the requests themselves (``emulator._requests``, ``writes``): how many reads and writes a pass
  made, with which parameters and headers, and that none reached the server;
- states no real component produces on demand: container logs (kwok's nodes serve none),
  exact container states and messages, a Job controller's failure with a chosen termination
  message, pod addresses a real network would never assign, foreign objects under Plinth's names.
Everything a real server and real controllers can show (objects accepted, rollouts, scheduling,
GC, RBAC, watches that follow real changes) belongs in tests/kube_real, and a test here says in
its module's docstring why it needs the stand-in.

What this subclass adds to kmock 0.8: server-side apply of a missing object
creates it (kmock answers 404); objects get uid, resourceVersion, generation and a creation time;
faults are injected per method and path; pods' container logs are served as the kubelet serves
them (``log`` subresource: container, previous, tailLines, sinceSeconds, sinceTime, timestamps,
limitBytes; 400 for a container waiting to start or a previous run that is not there), from
lines a test writes (``RunningEmulator.write_log``). Lists and watches are served as the API
server serves them and kmock 0.8 does not: one resourceVersion counter for every change, a list
reply carries it, equality label selectors and ``=``/``!=`` field selectors filter, a watch
resumes after ``resourceVersion`` from a bounded history, ends after ``timeoutSeconds``, and
answers a version older than the history (``compact``) with a 410 ERROR event. It runs in a
background thread because the driver's code is synchronous.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp.web
import kmock
from kmock._internal import enums, rendering

from deployments.drivers.kube.client import KINDS, Kind

STALL_SECONDS = 3.0
# The read timeout of the tests' clients: longer than the in-process emulator ever takes to
# answer on a loaded machine, so only an injected stall times out. A test that injects one gives
# its client a timeout below STALL_SECONDS.
CLIENT_TIMEOUT_S = 10.0


@dataclass
class Fault:
    method: str
    path_part: str
    status: int | None  # None: stall (the client times out)
    times: int = 1
    body: str | None = None  # the reply's own body, as any server may write it
    reason: str | None = None  # its HTTP reason phrase


class PlinthKubeEmulator(kmock.KubernetesEmulator):
    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.faults: list[Fault] = []
        # (namespace, pod, container, previous) -> [(time written, line)], oldest first.
        self.pod_logs: dict[tuple[str, str, str, bool], list[tuple[datetime, str]]] = {}
        self._versions = itertools.count(1)
        self.version = 0  # the last resourceVersion handed out
        # (resourceVersion, resource, event type, object) of every change, oldest first; the
        # oldest kept is the first a watch may resume after (``compact`` drops the rest).
        self.history: list[tuple[int, str, str | None, str, dict[str, Any]]] = []
        self.oldest = 0
        self._changed = asyncio.Condition()
        self.closing = False  # open watches end, so the server can stop
        for kind in KINDS.values():
            group = "" if kind.api_version == "v1" else kind.api_version.rsplit("/", 1)[0]
            version = kind.api_version.rsplit("/", 1)[-1]
            self.resources[f"{group}/{version}/{kind.plural}"] = {
                "kind": kind.kind,
                "namespaced": kind.namespaced,
                "verbs": ["get", "list", "patch", "delete", "create", "watch"],
            }

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        fault = self._take_fault(request)
        if fault is not None:
            if fault.status is None:
                await asyncio.sleep(STALL_SECONDS)
                fault.status = 504
            if fault.body is not None or fault.reason is not None:
                return aiohttp.web.Response(
                    status=fault.status, reason=fault.reason, text=fault.body or ""
                )
            raise kmock.KubernetesError(status=fault.status, reason="Injected", message="injected")
        if request.action == enums.action.UPDATE and request.name and _is_apply(request):
            return await self._apply(request)
        if request.action == enums.action.FETCH and request.subresource == "log":
            return await self._serve_pod_log(request)
        if (
            request.resource is not None
            and request.action == enums.action.FETCH
            and request.name
            and not request.subresource
        ):
            return await self._fetch(request)
        if request.resource is not None and request.action == enums.action.LIST:
            return await self._list(request)
        if request.resource is not None and request.action == enums.action.WATCH:
            return await self._watch(request)
        deleting = request.resource is not None and request.action == enums.action.DELETE
        key = (request.resource, request.namespace, request.name)
        response = await super()._handle(request)
        if deleting and request.name:
            async with self._lock:
                obj = self._objects[key] if key in self._objects else None  # noqa: SIM401 (no .get)
                if obj is not None and obj.deleted:
                    raw = plain(obj.last.raw)
                    self.record(resource_name(request.resource), "DELETED", raw, request.namespace)
        return response

    def record(
        self, resource: str, kind: str, raw: dict[str, Any], namespace: str | None
    ) -> dict[str, Any]:
        """Note one change (caller holds the lock): a new resourceVersion on ``raw``, an event
        for watches. Returns ``raw`` as stamped."""
        self.version = next(self._versions)
        raw = copy.deepcopy(raw)
        raw.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.history.append((self.version, resource, namespace, kind, raw))

        async def wake() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(wake())
        return raw

    def compact(self) -> None:
        """Forget the history, as etcd compaction does: older watches get 410 Gone."""
        self.history.clear()
        self.oldest = self.version

    def _matching(
        self, request: rendering.Request, obj: Mapping[str, Any], namespace: str | None
    ) -> bool:
        """``namespace``: where the object is stored (its own metadata may not say)."""
        meta = obj.get("metadata") or {}
        if request.namespace is not None and namespace != request.namespace:
            return False
        labels = meta.get("labels") or {}
        for term in filter(None, (request.params.get("labelSelector") or "").split(",")):
            key, _, value = term.partition("=")
            if labels.get(key) != value:
                return False
        for term in filter(None, (request.params.get("fieldSelector") or "").split(",")):
            negate = "!=" in term
            path, _, value = term.partition("!=" if negate else "=")
            field: Any = obj
            for part in path.split("."):
                field = field.get(part) if isinstance(field, Mapping) else None
            if (str(field or "") == value) == negate:
                return False
        return True

    async def _fetch(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """One object by key (kmock scans every object per GET: 40 ms at 300 objects)."""
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            found = key in self._objects and not self._objects[key].deleted
            raw = plain(self._objects[key].raw) if found else None
        if raw is None:
            raise kmock.KubernetesObjectNotFoundError()
        return aiohttp.web.json_response(raw)

    async def _list(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.resource not in list(self.resources):
            raise kmock.KubernetesResourceNotFoundError()
        async with self._lock:
            # Matched before copying: copying every object of a kind made a list at 1,000
            # endpoints cost more than the rest of the pass.
            items = [
                plain(obj.raw)
                for (resource, namespace, _), obj in self._objects.items()
                if resource == request.resource
                and not obj.deleted
                and self._matching(request, obj.raw, namespace)
            ]
            version = self.version
        body = {"metadata": {"resourceVersion": str(version)}, "items": items}
        return aiohttp.web.json_response(body)

    async def _watch(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """Events after ``resourceVersion`` (none given: from now), newline-delimited JSON."""
        assert request.resource is not None and request._raw_request is not None
        resource = resource_name(request.resource)
        timeout = float(request.params.get("timeoutSeconds") or 1800)
        after = int(request.params.get("resourceVersion") or self.version)
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request._raw_request)
        if after < self.oldest:
            gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
            await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            await response.write_eof()
            return response
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            # The history and its version as of now: a change recorded while a write below
            # waits on the client is sent on the next round, not skipped.
            events, top = list(self.history), self.version
            for version, res, ns, kind, raw in events:
                if version > after and res == resource and self._matching(request, raw, ns):
                    await response.write(json.dumps({"type": kind, "object": raw}).encode() + b"\n")
            after = max(after, top)
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0 or self.closing:
                break
            async with self._changed:
                # Checked again under the lock that changes and close() notify under: one that
                # came since the check above would otherwise be missed until the timeout.
                if self.version <= after and not self.closing:
                    with suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), timeout=left)
        await response.write_eof()
        return response

    def _take_fault(self, request: rendering.Request) -> Fault | None:
        for fault in self.faults:
            if fault.method == request.method.value and fault.path_part in request.url.path:
                fault.times -= 1
                if fault.times <= 0:
                    self.faults.remove(fault)
                return copy.copy(fault)
        return None

    async def _apply(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.resource not in list(self.resources):
            raise kmock.KubernetesResourceNotFoundError()  # e.g. a CRD that is not installed
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            existing = key in self._objects and not self._objects[key].deleted
            body = copy.deepcopy(request.data)
            if existing:
                self._objects[key].patch(body)
            else:
                self._objects[key] = body
            obj = self._objects[key]
            meta = plain(obj.get("metadata") or {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["generation"] = int(meta.get("generation", 0)) + 1
            obj["metadata"] = meta
            kind = "MODIFIED" if existing else "ADDED"
            raw = self.record(
                resource_name(request.resource), kind, plain(obj.raw), request.namespace
            )
            obj["metadata"] = plain(raw["metadata"])
        return aiohttp.web.json_response(raw, status=200 if existing else 201)

    async def _serve_pod_log(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """A container's log as the kubelet answers through the API server (plain text)."""
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                raise kmock.KubernetesObjectNotFoundError()
            pod = plain(self._objects[key].raw)
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        params = request.params
        container = params.get("container") or (containers[0] if len(containers) == 1 else "")
        if container not in containers:
            raise kmock.KubernetesError(
                status=400, reason="BadRequest", message=f"container {container!r} is not valid"
            )
        previous = params.get("previous") == "true"
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        status = next((c for c in statuses if c.get("name") == container), {})
        if (
            not previous
            and "waiting" in (status.get("state") or {})
            and not status.get("lastState")
        ):
            raise kmock.KubernetesError(
                status=400,
                reason="BadRequest",
                message=f'container "{container}" in pod "{request.name}" is waiting to start',
            )
        lines = self.pod_logs.get(
            (request.namespace or "", request.name or "", container, previous)
        )
        if lines is None and previous:
            raise kmock.KubernetesError(
                status=400,
                reason="BadRequest",
                message=f'previous terminated container "{container}" in pod "{request.name}" '
                "not found",
            )
        lines = list(lines or [])
        since = _since(params)
        if since is not None:
            lines = [(ts, text) for ts, text in lines if ts >= since]
        if "tailLines" in params:
            lines = lines[-int(params["tailLines"]) :] if int(params["tailLines"]) else []
        stamped = params.get("timestamps") == "true"
        body = "".join(
            f"{kubelet_time(ts)} {text}\n" if stamped else f"{text}\n" for ts, text in lines
        )
        data = body.encode()
        if "limitBytes" in params:
            data = data[: int(params["limitBytes"])]
        return aiohttp.web.Response(body=data, content_type="text/plain")


def kubelet_time(ts: datetime) -> str:
    """The kubelet's stamp: RFC 3339 in UTC with nine fraction digits."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


def _since(params: Mapping[str, str]) -> datetime | None:
    if "sinceSeconds" in params:
        return datetime.now(UTC) - timedelta(seconds=int(params["sinceSeconds"]))
    if "sinceTime" in params:
        return datetime.fromisoformat(params["sinceTime"].replace("Z", "+00:00"))
    return None


def plain(value: Any) -> Any:
    """kmock's versioned views as plain JSON-able values."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _is_apply(request: rendering.Request) -> bool:
    headers = {k.lower(): v for k, v in request.headers.items()}
    return headers.get("content-type", "").startswith("application/apply-patch")


def resource_name(resource: Any) -> str:
    """kmock's resource as ``group/version/plural`` (the core group empty)."""
    return f"{resource.group or ''}/{resource.version}/{resource.plural}"


def resource_of(kind: Kind) -> str:
    group = "" if kind.api_version == "v1" else kind.api_version.rsplit("/", 1)[0]
    return f"{group}/{kind.api_version.rsplit('/', 1)[-1]}/{kind.plural}"


class RunningEmulator:
    """The emulator on a loopback port, driven from the test's (synchronous) thread."""

    def __init__(self, emulator: PlinthKubeEmulator, loop: asyncio.AbstractEventLoop, url: str):
        self.emulator = emulator
        self.loop = loop
        self.url = url

    def call(self, fn: Any, *args: Any) -> Any:
        async def run() -> Any:
            async with self.emulator._lock:
                return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=10)

    def put(self, api_version: str, kind: str, namespace: str, obj: dict[str, Any]) -> None:
        """Store ``obj`` as a controller or another tool would have created it."""
        res = resource_of(KINDS[(api_version, kind)])
        obj = {"apiVersion": api_version, "kind": kind, **obj}
        key = (res, namespace, obj["metadata"]["name"])

        def store() -> None:
            objects = self.emulator.objects
            change = "MODIFIED" if key in objects and not objects[key].deleted else "ADDED"
            objects[key] = self.emulator.record(res, change, obj, namespace)

        self.call(store)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        res = resource_of(KINDS[(api_version, kind)])

        def read() -> dict[str, Any] | None:
            try:
                obj = self.emulator.objects[res, namespace, name]
            except KeyError:
                return None
            return None if obj.deleted else plain(obj.raw)

        return self.call(read)

    def writes(self) -> list[tuple[str, str]]:
        """(method, path) of every request that could change state, in order."""
        return [
            (r.method.value, r.url.path)
            for r in list(self.emulator._requests)
            if r.method.value in {"PATCH", "POST", "PUT", "DELETE"}
        ]

    def write_log(
        self,
        namespace: str,
        pod: str,
        container: str,
        lines: list[str],
        *,
        previous: bool = False,
        at: datetime | None = None,
    ) -> None:
        """Append ``lines`` to a container's log (``previous``: its last run's), written at
        ``at`` (default now), one microsecond apart so each has its own time."""
        start = at or datetime.now(UTC)

        def append() -> None:
            log = self.emulator.pod_logs.setdefault((namespace, pod, container, previous), [])
            log.extend((start + timedelta(microseconds=i), text) for i, text in enumerate(lines))

        self.call(append)

    def uninstall(self, api_version: str, kind: str) -> None:
        """Make a kind unknown to the API server, as a CRD that was never installed."""
        self.call(self.emulator.resources.__delitem__, resource_of(KINDS[(api_version, kind)]))

    def inject(
        self,
        method: str,
        path_part: str,
        status: int | None,
        times: int = 1,
        *,
        body: str | None = None,
        reason: str | None = None,
    ) -> None:
        """The next ``times`` matching requests fail with ``status`` (None: stall); ``body`` and
        ``reason`` make the reply say what a hostile server would."""
        self.emulator.faults.append(Fault(method, path_part, status, times, body, reason))


@contextmanager
def running_emulator() -> Iterator[RunningEmulator]:
    loop = asyncio.new_event_loop()
    ready: dict[str, Any] = {}
    started = threading.Event()
    stop: asyncio.Event | None = None

    async def serve() -> None:
        nonlocal stop
        stop = asyncio.Event()
        async with PlinthKubeEmulator() as emulator, kmock.Server(emulator) as server:
            ready["running"] = RunningEmulator(emulator, loop, f"http://127.0.0.1:{server.port}")
            started.set()
            await stop.wait()

    main = loop.create_task(serve())
    thread = threading.Thread(target=loop.run_until_complete, args=(main,), daemon=True)
    thread.start()
    if not started.wait(timeout=15):
        raise RuntimeError("the Kubernetes emulator did not start")
    try:
        yield ready["running"]
    finally:
        assert stop is not None
        emulator = ready["running"].emulator

        async def close() -> None:
            emulator.closing = True
            async with emulator._changed:
                emulator._changed.notify_all()
            assert stop is not None
            stop.set()

        asyncio.run_coroutine_threadsafe(close(), loop)
        thread.join(timeout=30)
        if thread.is_alive():
            # A request handler that will not end (a client's connection the server waits on)
            # holds the server's shutdown: cancel the handlers, not the server.
            def cancel_handlers() -> None:
                for task in asyncio.all_tasks(loop):
                    if task is not main:
                        task.cancel()

            loop.call_soon_threadsafe(cancel_handlers)
            thread.join(timeout=30)
        if thread.is_alive():
            raise RuntimeError("the Kubernetes emulator did not stop")
        loop.close()
