"""A Kubernetes API emulator for the kube driver's tests: kmock's, with its gaps filled.

kmock 0.8 keeps objects and serves get/list/patch/delete over real HTTP, so the official client
is exercised for real. What this subclass adds (see TESTING.md): server-side apply of a missing
object creates it (kmock answers 404); objects get uid, resourceVersion, generation and a creation
time; faults can be injected per method and path (an HTTP status, or a stall longer than the
client's timeout); and pods' container logs are served as the kubelet serves them (``log``
subresource: container, previous, tailLines, sinceSeconds, sinceTime, timestamps, limitBytes;
400 for a container waiting to start or a previous run that is not there), from lines a test
writes (``RunningEmulator.write_log``). It runs in a background thread because
the driver's code is synchronous.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp.web
import kmock
from kmock._internal import enums, rendering

from deployments.drivers.kube.client import KINDS, Kind

STALL_SECONDS = 3.0


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
        return await super()._handle(request)

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
            meta["resourceVersion"] = str(next(self._versions))
            meta["generation"] = int(meta.get("generation", 0)) + 1
            obj["metadata"] = meta
            raw = plain(obj.raw)
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
        self.call(self.emulator.objects.__setitem__, (res, namespace, obj["metadata"]["name"]), obj)

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

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    if not started.wait(timeout=15):
        raise RuntimeError("the Kubernetes emulator did not start")
    try:
        yield ready["running"]
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()
