"""List+watch caches of one cluster's objects, kept by a thread per kind in the worker process.

An ``Informer`` lists its kind once, then watches from the list's resourceVersion: every event
updates the cache and the version, a watch the server ends is resumed from the version, and
410 Gone (the version is no longer kept) lists again. The cache is *stale* until the first list
and again from any failure until a watch is re-established (backoff doubles, bounded): a reader
asks ``synced`` first and reads the API directly otherwise. Nothing here deletes or writes; the
driver deletes only what a direct LIST returned, so a stale cache never deletes anything.

``ClusterCache`` holds one informer per kind (Deployments, LeaderWorkerSets, Pods, Services,
Pod Events by field selector, Nodes) for one cluster and namespace, started lazily on first
use: Celery prefork workers each keep their own (the cache is "shared by a worker").
"""

from __future__ import annotations

import logging
import threading
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
                if isinstance(exc, KubePermanentError) and exc.status == 404:
                    self.version = ""  # e.g. a CRD installed later: list again
                log.warning(
                    "watch of %s failed (%s): retrying in %.1fs", self.kind.plural, exc, delay
                )
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.backoff_s[1])

    def _relist(self) -> None:
        self._synced.clear()
        items, version = self.client.list_versioned(
            self.kind, self.namespace, self.selector, self.fields
        )
        with self._lock:
            self._objects = {_key(o): o for o in items}
        self.version = version
        self.lists += 1
        self._synced.set()

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
            if change in {"ADDED", "MODIFIED"} and _has_labels(obj, self.selector):
                with self._lock:
                    self._objects[_key(obj)] = obj
            elif change in {"DELETED", "ADDED", "MODIFIED"}:  # deleted, or no longer selected
                with self._lock:
                    self._objects.pop(_key(obj), None)
            if version:
                self.version = version
            for listener in list(self.listeners):
                listener(change, obj)


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
            # Only events about pods: the rest of a busy namespace's events are not read.
            "Event": informer("v1", "Event", namespace, fields="involvedObject.kind=Pod"),
            "Node": informer("v1", "Node", None),
        }
        if has_lws:
            self.informers["LeaderWorkerSet"] = informer(
                "leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", namespace, selector=owned
            )

    def start(self) -> ClusterCache:
        for informer in self.informers.values():
            informer.start()
        return self

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def fresh(self, kind: str, namespace: str) -> Informer | None:
        """The synced informer for ``kind`` in ``namespace``; None: read the API instead."""
        informer = self.informers.get(kind)
        if informer is None or namespace != self.namespace or not informer.synced:
            return None
        return informer


_caches: dict[Any, ClusterCache] = {}
_caches_lock = threading.Lock()


def cache_for(key: Any, build: Callable[[], ClusterCache]) -> ClusterCache:
    """This process's cache for ``key`` (a cluster and what reaches it), built and started on
    first use; a changed key (a new kubeconfig) gets a new cache and the old one stops."""
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None:
            stale = [k for k in _caches if k[0] == key[0]] if isinstance(key, tuple) else []
            for old in stale:
                _caches.pop(old).stop()
            cache = _caches[key] = build().start()
        return cache


def stop_all() -> None:
    with _caches_lock:
        while _caches:
            _caches.popitem()[1].stop()


def _key(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _has_labels(obj: Mapping[str, Any], wanted: Mapping[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())
