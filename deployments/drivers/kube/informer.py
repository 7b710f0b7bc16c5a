"""List+watch caches of one cluster's objects, kept by a thread per kind in the worker process.

An ``Informer`` lists its kind once, then watches from the list's resourceVersion: every event
updates the cache and the version, and so does every bookmark (asked for with each watch: the
server's version while none of the kind's objects changed), a watch the server ends is resumed
from the version, and 410 Gone (the version is no longer kept: etcd compacted it, or a restarted
API server's watch cache starts after it) lists again. The cache is *stale* until the first list
and again from any failure until a watch is re-established (backoff doubles, bounded): a reader
asks ``synced`` first and reads the API directly otherwise. Nothing here deletes or writes; the
driver deletes only what a direct LIST returned, so a stale cache never deletes anything.

``ClusterCache`` holds one informer per kind (Deployments, LeaderWorkerSets, Pods, Services,
weights download Jobs, Pod Events by field selector, Nodes) for one cluster and namespace,
started lazily on first use: Celery prefork workers each keep their own (the cache is "shared
by a worker"). Its ``on_change`` maps every watched change of an endpoint's object (a Pod,
Deployment, LWS, Service or Job by its labels, a pod's Event by the pod's) to the endpoint's
id and hands the ids to a callback, a burst of changes at most once per ``debounce_s``: the
worker makes those endpoints due, so an idle endpoint needs no pass until something happens to
it. A relist (after 410)
reports what changed while no watch was open; the first list reports nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from deployments.drivers.errors import DriverError
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import (
    WATCH_OPEN,
    Kind,
    KubeClient,
    KubeGone,
    KubePermanentError,
    kind_of,
)

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
_Objects = list[dict[str, Any]]  # ``list`` is a method's name inside Informer


class Informer:
    """One kind's objects in one namespace (None: cluster-wide), as the last list+watch saw them."""

    def __init__(
        self,
        client: KubeClient,
        kind: Kind,
        namespace: str | None,
        *,
        selector: Mapping[str, str] | None = None,
        fields: str | None = None,
        watch_s: int = 300,
        backoff_s: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        """``watch_s``: how long the server keeps one watch open before it is resumed;
        ``backoff_s``: the first and the longest wait after a failure."""
        self.client = client
        self.kind = kind
        self.namespace = namespace
        self.selector = dict(selector or {})
        self.fields = fields
        self.watch_s = watch_s
        self.backoff_s = backoff_s
        self.version = ""  # empty: list before watching
        self.lists = 0  # lists made (the first, and one per 410): for tests and the bench
        self.watches = 0  # watches opened
        self.bookmarks = 0  # bookmarks received: versions to resume from, no object changed
        self._objects: dict[Key, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.listeners: list[Callable[[str, dict[str, Any]], None]] = []

    # --- reading ---

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def list(
        self, namespace: str, selector: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        wanted = dict(selector or {})
        with self._lock:
            objs = [o for (ns, _), o in self._objects.items() if ns == namespace]
        return [o for o in objs if _has_labels(o, wanted)]

    def all(self) -> _Objects:
        """Every object held (of every namespace watched; cluster-scoped kinds have none)."""
        with self._lock:
            return list(self._objects.values())

    def __len__(self) -> int:
        return len(self._objects)

    # --- the thread ---

    def start(self) -> Informer:
        if self._thread is None:
            name = f"informer-{self.kind.plural}-{self.namespace or 'all'}"
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 0.0) -> None:
        """Stop applying events at once; the thread ends when its watch next yields or ends
        (``timeout``: wait that long for it)."""
        self._stop.set()
        if self._thread is not None and timeout:
            self._thread.join(timeout)

    def _run(self) -> None:
        delay = self.backoff_s[0]
        while not self._stop.is_set():
            try:
                if not self.version:
                    self._relist()
                self._watch()
                delay = self.backoff_s[0]  # the server ended the watch: resume at once
            except KubeGone:
                log.info("watch of %s expired (410): listing again", self.kind.plural)
                self.version = ""
            except (DriverError, ValueError) as exc:
                # Events may be missing until a watch is open again: stale till then.
                self._synced.clear()
                missing = isinstance(exc, KubePermanentError) and exc.status == 404
                if missing:
                    self.version = ""  # e.g. a CRD installed later: list again
                # A kind the cluster lacks (no LWS CRD), or nodes without the optional
                # cluster-wide rights (k8s/gpu-inventory), are normal: no warning each time.
                refused = isinstance(exc, KubePermanentError) and exc.status == 403
                quiet = missing or (refused and not self.kind.namespaced)
                log.log(
                    logging.INFO if quiet else logging.WARNING,
                    "watch of %s failed (%s): retrying in %.1fs",
                    self.kind.plural,
                    exc,
                    delay,
                )
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.backoff_s[1])

    def _relist(self) -> None:
        self._synced.clear()
        items, version = self.client.list_versioned(
            self.kind, self.namespace, self.selector, self.fields
        )
        fresh = {_key(o): o for o in items}
        with self._lock:
            before, self._objects = self._objects, fresh
        self.version = version
        self.lists += 1
        self._synced.set()
        if self.lists > 1:  # a relist: what changed while no watch was open, as a watch says it
            for change, obj in _differences(before, fresh):
                self._tell(change, obj)

    def _watch(self) -> None:
        events = self.client.watch(
            self.kind,
            self.namespace,
            self.version,
            selector=self.selector,
            fields=self.fields,
            timeout_s=self.watch_s,
        )
        for change, obj in events:
            if self._stop.is_set():
                events.close()  # type: ignore[attr-defined]
                return
            if change == WATCH_OPEN:
                self.watches += 1
                self._synced.set()
                continue
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if change == "BOOKMARK":
                # The server's version while nothing of ours changed: resuming from it (not
                # from the last change, which may be older than the server still keeps) spares
                # a quiet kind a 410 and a relist. Nothing changed, so no listener hears it.
                self.version = version or self.version
                self.bookmarks += 1
                continue
            if change in {"ADDED", "MODIFIED"} and _has_labels(obj, self.selector):
                with self._lock:
                    self._objects[_key(obj)] = obj
            elif change in {"DELETED", "ADDED", "MODIFIED"}:  # deleted, or no longer selected
                with self._lock:
                    self._objects.pop(_key(obj), None)
            if version:
                self.version = version
            self._tell(change, obj)

    def _tell(self, change: str, obj: dict[str, Any]) -> None:
        for listener in list(self.listeners):
            try:
                listener(change, obj)
            except Exception:  # a listener's bug must not stop the cache
                log.exception("a listener of the %s cache failed", self.kind.plural)


class ClusterCache:
    """The informers of one cluster's namespace: one per kind the driver reads."""

    def __init__(
        self, client: KubeClient, namespace: str, *, has_lws: bool = True, watch_s: int = 300
    ) -> None:
        self.client = client
        self.namespace = namespace
        owned = {L.MANAGED_BY: L.PLINTH}

        def informer(api_version: str, kind: str, ns: str | None, **how: Any) -> Informer:
            return Informer(client, kind_of(api_version, kind), ns, watch_s=watch_s, **how)

        self.informers = {
            "Deployment": informer("apps/v1", "Deployment", namespace, selector=owned),
            "Pod": informer("v1", "Pod", namespace, selector=owned),
            "Service": informer("v1", "Service", namespace, selector=owned),
            # A failed download fails its rollout: watched, so that is seen at once.
            "Job": informer("batch/v1", "Job", namespace, selector={**owned, L.ROLE: L.WEIGHTS}),
            # Only events about pods: the rest of a busy namespace's events are not read.
            "Event": informer("v1", "Event", namespace, fields="involvedObject.kind=Pod"),
            "Node": informer("v1", "Node", None),
        }
        if has_lws:
            self.informers["LeaderWorkerSet"] = informer(
                "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", namespace, selector=owned
            )

        self.used_at = time.monotonic()  # when a driver last asked for it (``cache_for``)
        self._due: Debouncer | None = None

    def start(self) -> ClusterCache:
        for informer in self.informers.values():
            informer.start()
        return self

    def stop(self) -> None:
        """Stop every informer and hand over nothing more; the client's idle connections close
        (a watch still open ends with its thread, when the server next writes or ends it)."""
        for informer in self.informers.values():
            informer.stop()
        if self._due is not None:
            self._due.stop()
        self.client.close()

    def fresh(self, kind: str, namespace: str | None) -> Informer | None:
        """The synced informer for ``kind`` in ``namespace`` (None for Nodes, which have none);
        None: read the API instead."""
        informer = self.informers.get(kind)
        if informer is None or not informer.synced:
            return None
        if namespace != (None if kind == "Node" else self.namespace):
            return None
        return informer

    def on_change(self, callback: Callable[[set[str]], None], *, debounce_s: float = 1.0) -> None:
        """Call ``callback`` with the ids of the endpoints whose objects changed, at most once
        per ``debounce_s`` (from a thread of its own; a failing callback loses that batch only,
        the endpoints' own schedule still passes by). Call before ``start``."""
        self._due = Debouncer(callback, debounce_s)
        for kind, informer in self.informers.items():
            if kind != "Node":  # nodes belong to no endpoint (the inventory reads them)
                informer.listeners.append(self._changed)

    def _changed(self, change: str, obj: dict[str, Any]) -> None:
        owner = self.owner_of(obj)
        if owner and self._due is not None:
            self._due.add(owner)

    def owner_of(self, obj: Mapping[str, Any]) -> str:
        """The id of the endpoint ``obj`` belongs to: its labels say, or for an Event those of
        the pod it is about (while the cache still holds that pod); "" for none."""
        involved = obj.get("involvedObject")
        if isinstance(involved, Mapping):
            pod = self.informers["Pod"].get(
                str(involved.get("namespace") or self.namespace), str(involved.get("name") or "")
            )
            obj = pod or {}
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(L.MANAGED_BY) != L.PLINTH:
            return ""
        return str(labels.get(L.DEPLOYMENT) or "")


class Debouncer:
    """Collects keys and hands them over in one batch ``delay_s`` after the first of a burst."""

    def __init__(self, flush: Callable[[set[str]], None], delay_s: float) -> None:
        self.flush = flush
        self.delay_s = delay_s
        self.batches = 0  # batches handed over: for tests and the bench
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, key: str) -> None:
        with self._lock:
            self._pending.add(key)
            self._wake.set()
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="due", daemon=True)
                self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            # The rest of the burst arrives meanwhile; a stop hands over nothing more.
            if self._stop.wait(self.delay_s):
                return
            with self._lock:
                batch, self._pending = self._pending, set()
                self._wake.clear()
            if not batch:
                continue
            self.batches += 1
            try:
                self.flush(batch)
            except Exception:
                log.exception(
                    "%d endpoints changed on the cluster but were not made due", len(batch)
                )


_caches: dict[Any, ClusterCache] = {}
_caches_lock = threading.Lock()
_caches_pid = os.getpid()
# A cache no driver asked for this long (its cluster was deleted, or the worker has not served it
# since) stops, and the next pass that needs it starts it again.
IDLE_S = 900.0


def cache_for(
    key: Any, build: Callable[[], ClusterCache], *, idle_s: float = IDLE_S
) -> ClusterCache:
    """This process's cache for ``key`` (a cluster and what reaches it), built and started on
    first use; a changed key (a new kubeconfig) gets a new cache and the old one stops, as do
    caches nobody asked for in ``idle_s`` seconds."""
    global _caches_pid
    with _caches_lock:
        if _caches_pid != os.getpid():
            # A forked child (a prefork pool's process) inherits the dict, not the threads.
            _caches.clear()
            _caches_pid = os.getpid()
        now = time.monotonic()
        unused = [k for k, c in _caches.items() if k != key and now - c.used_at > idle_s]
        stale = [k for k in _caches if k != key and _cluster(k) == _cluster(key)]
        for old in {*unused, *stale}:
            _caches.pop(old).stop()
        cache = _caches.get(key)
        if cache is None:
            cache = _caches[key] = build().start()
        cache.used_at = now
        return cache


def stop_all() -> None:
    with _caches_lock:
        while _caches:
            _caches.popitem()[1].stop()


def _cluster(key: Any) -> Any:
    return key[0] if isinstance(key, tuple) else key


def _differences(
    before: Mapping[Key, dict[str, Any]], after: Mapping[Key, dict[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """What a watch would have said to turn ``before`` into ``after``."""
    changes: list[tuple[str, dict[str, Any]]] = []
    for key, obj in after.items():
        old = before.get(key)
        if old is None:
            changes.append(("ADDED", obj))
        elif _version(old) != _version(obj):
            changes.append(("MODIFIED", obj))
    changes += [("DELETED", obj) for key, obj in before.items() if key not in after]
    return changes


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _has_labels(obj: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())
