"""The Kubernetes driver: apply rendered manifests, observe pods, delete what the endpoint owns.

A pass first reads one object, the *anchor* (the last Service rendered), whose ``set-hash``
annotation is the hash of every object the last complete apply rendered: when it equals this
pass's, the endpoint is as rendered and nothing else is read or written (one GET for a settled
endpoint, or none when the worker's list+watch cache is synced, where reading and pruning every
object cost ~21 calls). Pods and events are read from that cache too. Otherwise apply reads each
object: one that exists without Plinth's labels for this endpoint is refused
(``ForeignObjectError``) and never written; one whose config hash matches is left alone; the rest
are server-side applied, forcing field conflicts only on objects already known to be ours. Kinds
the new revision no longer renders (a role removed, a Deployment that became a LeaderWorkerSet)
are deleted, and only then is the anchor written with the new set hash, so a worker that dies
half way leaves the old hash and the next pass does it all again. So does an object found on its
way out (a finalizer holds it), which an apply cannot bring back: it is made again once gone.
Rolling out and rolling back are Kubernetes' own rolling update: applying the previous revision
again is the rollback.

A weights download Job that failed is reported with its revision (``observe``), and kept as it
is while that revision is placed, so a failed rollout is not retried pass after pass; placing
another revision (an edit, a rollback) replaces it with a fresh Job, since a Job never runs
again once it has given up.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from deployments.drivers import base
from deployments.drivers.errors import ForeignObjectError
from deployments.drivers.kube import benchmark, placement, quantize, warm
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KINDS, Kind, KubeClient, KubePermanentError, kind_of
from deployments.drivers.kube.informer import ClusterCache
from deployments.drivers.kube.observe import job_failed, observation
from deployments.drivers.kube.render import KubeOptions, render_revision
from deployments.drivers.kube.render.router import router_url
from deployments.drivers.kube.render.warm import has_warm_pool
from runtime.launch import ROUTER_PORT
from runtime.lora_live import LoraLiveChange

log = logging.getLogger(__name__)

# What apply may create, in the order delete removes them (workloads first).
OWNED_KINDS = [
    ("apps/v1", "Deployment"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("batch/v1", "Job"),  # the weights download into a shared model cache; kept while stopped
    ("apps/v1", "DaemonSet"),  # weights pre-staged on the GPU type's nodes; kept while stopped
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "Service"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "ServiceAccount"),
    ("v1", "Secret"),
    ("v1", "ConfigMap"),  # a warm pool's in-pod agent (render.warm)
    ("v1", "PersistentVolumeClaim"),  # the model cache of a cluster that asks for one each
]
WORKLOAD_KINDS = OWNED_KINDS[:2]
# What a benchmark of the endpoint puts beside it (``benchmark_job``): deleted with the endpoint.
BENCHMARK_KINDS = [("batch/v1", "Job"), ("v1", "Secret"), ("v1", "ConfigMap")]
# What ``_apply_one`` did with an object.
WRITTEN, UNCHANGED, LEAVING = "written", "unchanged", "leaving"
# Pods that may hold GPUs (as ``KubeClient.gpu_nodes_and_pods`` lists them).
_UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"


class KubeDriver:
    def __init__(
        self,
        client: KubeClient,
        options: KubeOptions | None = None,
        *,
        has_lws: bool = True,
        skip_unchanged: bool = True,
        cache: ClusterCache | None = None,
    ) -> None:
        """``skip_unchanged`` off: read, apply and prune every object on every pass (the path
        before set hashes, kept for ``bench/kube_scale.py --old``). ``cache``: the worker's
        list+watch caches of this cluster; the anchor, pods and events are read from them while
        they are synced, and from the API otherwise. Prune and delete always list the API."""
        self.client = client
        self.cache = cache
        self.options = options or KubeOptions()
        # Clusters without the LWS CRD answer 404 on its list: treat as "none there".
        self.has_lws = has_lws
        self.skip_unchanged = skip_unchanged

    def close(self) -> None:
        self.client.close()

    def run_benchmark(
        self, run: base.BenchmarkRun, on_point: Callable[[int, dict[str, Any]], None]
    ) -> None:
        """The sweep as one Job in the endpoint's namespace (``kube.benchmark``)."""
        benchmark.run_benchmark(self.client, self.options, run, on_point)

    def start_quantization(self, job: base.QuantizationJob) -> None:
        """The attempt as a Job on a node of its GPU type (``kube.quantize``)."""
        quantize.start(self.client, self.options, job)

    def read_quantization(
        self, job: base.QuantizationJob, after: str = ""
    ) -> base.QuantizationProgress:
        return quantize.read(self.client, job, after)

    def remove_quantization(self, job: base.QuantizationJob) -> bool:
        return quantize.remove(self.client, job)

    # --- apply ---

    def apply_adapters(
        self,
        ref: base.DeploymentRef,
        serving: int,
        number: int,
        change: LoraLiveChange,
    ) -> bool:
        """Not live here: the worker reaches no pod directly, and smg 1.13 forwards no LoRA
        management to its workers (``POST /load_lora_adapter`` to it answers 404 "Invalid URL"),
        so an adapters-only change is rolled out; the new pods load the adapters from their
        flags."""
        return False

    def apply(self, ref: base.DeploymentRef, revision: base.RevisionPlan) -> None:
        revision = self._warm_pool(ref, revision)
        manifests = render_revision(ref, revision, self.options)
        digest = set_hash(manifests)
        # The anchor is the last Service (the router's, else an engine role's): every endpoint
        # has one, and Services are among the kinds the worker's cache watches.
        at = max(i for i, m in enumerate(manifests) if m["kind"] == "Service")
        rest = manifests[:at] + manifests[at + 1 :]
        anchor = _with_set_hash(manifests[at], digest)
        if self.skip_unchanged:
            current = self._read(anchor, ref.namespace)
            if current is not None and L.is_ours(current, ref.id) and _set_hash(current) == digest:
                return  # applied and pruned as rendered by a pass that finished
        wanted = {(m["apiVersion"], m["kind"], m["metadata"]["name"]) for m in manifests}
        leaving = [m for m in rest if self._apply_one(ref, m, wanted=wanted) == LEAVING]
        # Pruned whenever the rendering changed (and on every pass with ``skip_unchanged``
        # off), before the anchor records the hash: a worker that died between applying and
        # pruning finds the old hash next time and prunes then.
        self._prune(ref, wanted)
        if leaving:
            # Not applied as rendered until those are gone and made again: the anchor keeps
            # the old hash, so the next pass does it all again.
            return
        self._apply_one(ref, anchor, always=True)

    def _made_by_one_we_prune(
        self, ref: base.DeploymentRef, obj: dict[str, Any], wanted: set[tuple[str, str, str]]
    ) -> bool:
        """``obj`` is not ours but was made by an object of ours that this pass prunes: the
        headless Service a LeaderWorkerSet makes under its own name, met by the engines' Service
        when a replica goes back to one node. The garbage collector removes it after its owner."""
        for owner in obj["metadata"].get("ownerReferences") or []:
            key = (owner["apiVersion"], owner["kind"], owner["name"])
            if not owner.get("controller") or key in wanted or key[:2] not in KINDS:
                continue
            made_by = self.client.get(kind_of(*key[:2]), ref.namespace, owner["name"])
            if made_by is not None and L.is_ours(made_by, ref.id):
                return True
        return False

    def _warm_pool(self, ref: base.DeploymentRef, revision: base.RevisionPlan) -> base.RevisionPlan:
        """``revision`` running the warm pods its pool keeps beside the wanted ones, its engine
        pods marked serving or warm first (``kube.warm``), so a lower count removes the right
        ones."""
        role = revision.plan.role("engine")
        if role is None or not has_warm_pool(revision, role):
            return revision
        pod_kind = kind_of("v1", "Pod")
        pods = self._list(pod_kind, ref.namespace, L.owner_selector(ref.id))
        live = warm.live_pods(pods, revision.number)
        plan = warm.plan_pool(live, revision.replicas, revision.warm_replicas, time.time())
        for name, marks in plan.annotations.items():
            try:
                self.client.annotate(pod_kind, ref.namespace, name, marks)
            except KubePermanentError as exc:
                if exc.status != 404:  # gone meanwhile: nothing to mark
                    raise
        return replace(revision, replicas=revision.replicas + plan.kept)

    def _apply_one(
        self,
        ref: base.DeploymentRef,
        manifest: dict[str, Any],
        *,
        always: bool = False,
        wanted: set[tuple[str, str, str]] | None = None,
    ) -> str:
        """Apply one object unless it is already as rendered (``always``: even then, for the
        anchor's set hash, which its config hash does not cover): WRITTEN or UNCHANGED; LEAVING
        when the live one is being deleted (a finalizer holds it: a claim that pods still use,
        a workload deleted in the foreground), which no apply brings back, so it is left to go
        and made again by a later pass."""
        kind = kind_of(manifest["apiVersion"], manifest["kind"])
        name = manifest["metadata"]["name"]
        current = self.client.get(kind, ref.namespace, name)
        if current is not None and not L.is_ours(current, ref.id):
            if self._made_by_one_we_prune(ref, current, wanted or set()):
                return LEAVING
            raise ForeignObjectError(
                f"{manifest['kind']} {ref.namespace}/{name} exists and is not managed by Plinth "
                "for this endpoint; rename the endpoint or remove that object"
            )
        if current is not None and current["metadata"].get("deletionTimestamp"):
            return LEAVING
        if current is not None and _failed_for_another_revision(current, manifest):
            # Gone at once (its failed pods after it), so the apply below creates it afresh.
            self.client.delete(kind, ref.namespace, name, propagation="Background")
            current = None
        unchanged = current is not None and _config_hash(current) == _config_hash(manifest)
        if unchanged and (not always or _set_hash(current or {}) == _set_hash(manifest)):
            return UNCHANGED
        if current is not None and manifest["kind"] == "PersistentVolumeClaim":
            manifest = _keeping_claim_spec(manifest, current)
        try:
            self.client.apply(manifest, force=current is not None)
        except KubePermanentError as exc:
            if exc.status == 404 and manifest["kind"] == "LeaderWorkerSet":
                raise KubePermanentError(
                    "a replica of this endpoint spans several nodes, which needs LeaderWorkerSet "
                    "(https://github.com/kubernetes-sigs/lws) installed on the cluster",
                    status=404,
                ) from exc
            raise
        return WRITTEN

    def _read(self, manifest: dict[str, Any], namespace: str) -> dict[str, Any] | None:
        """The live object ``manifest`` names: from the cache while it is synced, else a GET."""
        name = manifest["metadata"]["name"]
        informer = self.cache.fresh(manifest["kind"], namespace) if self.cache else None
        if informer is not None:
            return informer.get(namespace, name)
        kind = kind_of(manifest["apiVersion"], manifest["kind"])
        return self.client.get(kind, namespace, name)

    def _owned(
        self, ref: base.DeploymentRef, kinds: list[tuple[str, str]]
    ) -> list[tuple[Kind, dict[str, Any]]]:
        """(kind, object) of this endpoint's objects; list items carry no apiVersion/kind."""
        found: list[tuple[Kind, dict[str, Any]]] = []
        for api_version, kind_name in kinds:
            if kind_name == "LeaderWorkerSet" and not self.has_lws:
                continue
            kind = kind_of(api_version, kind_name)
            try:
                objs = self.client.list(kind, ref.namespace, L.owner_selector(ref.id))
            except KubePermanentError as exc:
                if exc.status == 404 and kind_name == "LeaderWorkerSet":
                    continue  # the LWS CRD is not installed: there are none
                raise
            found += [(kind, o) for o in objs if L.is_ours(o, ref.id)]
        return found

    def _prune(self, ref: base.DeploymentRef, wanted: set[tuple[str, str, str]]) -> None:
        for kind, obj in self._owned(ref, OWNED_KINDS):
            if (kind.api_version, kind.kind, obj["metadata"]["name"]) not in wanted:
                self.client.delete(kind, ref.namespace, obj["metadata"]["name"])

    # --- observe ---

    def observe(self, ref: base.DeploymentRef) -> base.Observation:
        pod_kind = kind_of("v1", "Pod")
        pods = self._list(pod_kind, ref.namespace, L.owner_selector(ref.id))
        events = self._list(kind_of("v1", "Event"), ref.namespace) if pods else []
        jobs = self._list(kind_of("batch/v1", "Job"), ref.namespace, L.weights_selector(ref.id))
        # A failed Job's pods say why it failed; they carry no endpoint label, so they are read
        # by their Job's uid, and only then.
        job_pods = [
            pod
            for job in jobs
            if job_failed(job) is not None
            for pod in self._list(pod_kind, ref.namespace, {L.JOB_UID: _uid(job)})
        ]
        workloads = self._list(
            kind_of("apps/v1", "Deployment"), ref.namespace, L.owner_selector(ref.id)
        )
        return observation(pods, events, router_url(ref, ROUTER_PORT), jobs, job_pods, workloads)

    def _list(
        self, kind: Kind, namespace: str, selector: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Objects of ``kind``: from the worker's cache while it is synced, else the API."""
        cached = self.cache.fresh(kind.kind, namespace) if self.cache else None
        if cached is not None:
            return cached.list(namespace, selector)
        return self.client.list(kind, namespace, selector)

    # --- the cluster ---

    def gpu_inventory(self) -> dict[str, Any]:
        """The cluster's GPU nodes as ``placement.gpu_inventory`` summarises them. Nodes come
        from the worker's cache while it is synced; the pods holding GPUs are every namespace's,
        which no cache holds (the worker watches only its own namespace's), so they are listed."""
        cached = self.cache.fresh("Node", None) if self.cache else None
        if cached is None:
            nodes, pods = self.client.gpu_nodes_and_pods()
        else:
            nodes = cached.all()
            pods, _ = self.client.list_versioned(kind_of("v1", "Pod"), None, fields=_UNFINISHED)
        return placement.gpu_inventory(nodes, pods, self.options.cluster)

    def gpu_node_readiness(self) -> tuple[int, int]:
        """(GPU nodes, Ready ones), asked of the API server itself, never of the cache: a
        cache keeps answering from memory after the server it watched stopped answering."""
        nodes = self.client.list_versioned(kind_of("v1", "Node"), None)[0]
        return placement.gpu_node_readiness(nodes, self.options.cluster)

    # --- stop / delete ---

    def stop(self, ref: base.DeploymentRef) -> bool:
        """Stop the workloads; the rest stays for the next start (a download that finished
        among it), but for two things a start must not find. The anchor: its set hash says
        every object is as rendered, which it no longer is, so its Service goes and the next
        apply writes every object again. And a download Job that failed: a start tries afresh."""
        for kind, obj in self._owned(ref, [("v1", "Service"), ("batch/v1", "Job")]):
            failed = _role(obj) == L.WEIGHTS and job_failed(obj) is not None
            if (_set_hash(obj) or failed) and not obj["metadata"].get("deletionTimestamp"):
                self.client.delete(kind, ref.namespace, obj["metadata"]["name"])
        return self._delete_kinds(ref, WORKLOAD_KINDS)

    def delete(self, ref: base.DeploymentRef) -> bool:
        benchmarks_gone = self._delete_benchmarks(ref)
        return self._delete_kinds(ref, OWNED_KINDS) and benchmarks_gone

    def _delete_benchmarks(self, ref: base.DeploymentRef) -> bool:
        """Delete the objects of the endpoint's benchmarks; whether none was left."""
        left = False
        for api_version, kind_name in BENCHMARK_KINDS:
            kind = kind_of(api_version, kind_name)
            for obj in self.client.list(kind, ref.namespace, L.benchmark_selector(ref.id)):
                left = True
                if not obj["metadata"].get("deletionTimestamp"):
                    self.client.delete(kind, ref.namespace, obj["metadata"]["name"])
        return not left

    def _delete_kinds(self, ref: base.DeploymentRef, kinds: list[tuple[str, str]]) -> bool:
        for kind, obj in self._owned(ref, kinds):
            if not obj["metadata"].get("deletionTimestamp"):
                self.client.delete(kind, ref.namespace, obj["metadata"]["name"])
        # Gone once no owned object and no pod is left (pods go after their workloads).
        pods = self.client.list(kind_of("v1", "Pod"), ref.namespace, L.owner_selector(ref.id))
        return not self._owned(ref, kinds) and not pods

    # --- logs ---

    def logs(self, ref: base.DeploymentRef, query: base.LogQuery) -> base.LogLines:
        """A pod's engine (or router) container log, read with ``timestamps=true`` so every line
        has its time; a cursor is the time of the last line returned."""
        pods = self.client.list(kind_of("v1", "Pod"), ref.namespace, L.owner_selector(ref.id))
        by_name = {p["metadata"]["name"]: p for p in pods}
        sources = tuple(_log_source(by_name[name]) for name in sorted(by_name))
        source = base.pick_source(sources, query)
        if source is None or (query.previous and not source.has_previous):
            # No such replica, or no previous run to read: the caller says which.
            return base.LogLines(replica=source.name if source else "", replicas=sources)
        if not query.previous and not _started(by_name[source.name]):
            # Scheduling, pulling the image: the API refuses a log that does not exist yet (400).
            return base.LogLines(
                replica=source.name,
                replicas=sources,
                cursor=query.after or "",
                continued=query.after is not None,
            )
        after = _stamp(query.after or "")
        since = query.since
        if after is not None and (since is None or after[0] > since):
            since = after[0]  # whole seconds: the lines of that second up to the cursor repeat
        text = self.client.pod_log(
            ref.namespace,
            source.name,
            container=_log_container(by_name[source.name]),
            tail=None if after is not None else query.tail,
            since=since,
            previous=query.previous,
            timestamps=True,
            limit_bytes=base.LOG_READ_BYTES,
        )
        raw = text.split("\n")
        cut = len(text.encode()) >= base.LOG_READ_BYTES and len(raw) > 1
        # The last piece is the start of a line still being written (or "" after the last
        # newline), or the end of a reply cut at the byte limit: shown once it is whole.
        stamped = [_stamped_line(line) for line in raw[:-1]]
        if after is not None:
            stamped = [(s, line) for s, line in stamped if s is None or s > after]
        if query.since is not None:  # the API filters to the second; this to the nanosecond
            stamped = [(s, ln) for s, ln in stamped if s is None or _as_datetime(s) >= query.since]
        more = cut or len(stamped) > query.tail
        stamped = stamped[: query.tail] if after is not None else stamped[-query.tail :]
        last = next((s for s, _ in reversed(stamped) if s is not None), after)
        lines = [
            base.LogLine(base.clean_log_line(line), _as_datetime(s) if s else None)
            for s, line in stamped
        ]
        return base.LogLines(
            replica=source.name,
            lines=lines,
            replicas=sources,
            cursor=_cursor(last) if last is not None else "",
            continued=after is not None,
            more=more,
        )


# A cursor and a stamp: (the time to the second, aware; nanoseconds within that second).
Stamp = tuple[datetime, int]
_RFC3339 = re.compile(r"\A(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?Z\Z")


def _stamp(text: str) -> Stamp | None:
    """The kubelet's RFC 3339 time with nanoseconds (``2025-06-01T12:00:00.123456789Z``)."""
    match = _RFC3339.match(text)
    if match is None:
        return None
    try:
        second = datetime.fromisoformat(match[1]).replace(tzinfo=UTC)
    except ValueError:
        return None
    return second, int((match[2] or "0").ljust(9, "0"))


def _stamped_line(line: str) -> tuple[Stamp | None, str]:
    stamp_text, _, rest = line.partition(" ")
    stamp = _stamp(stamp_text)
    return (stamp, rest.rstrip("\r")) if stamp is not None else (None, line.rstrip("\r"))


def _cursor(stamp: Stamp) -> str:
    return f"{stamp[0].strftime('%Y-%m-%dT%H:%M:%S')}.{stamp[1]:09d}Z"


def _as_datetime(stamp: Stamp) -> datetime:
    return stamp[0] + timedelta(microseconds=stamp[1] // 1000)


def _log_container(pod: dict[str, Any]) -> str:
    """The container whose log is the replica's: the router's or the engine's, else the first."""
    wanted = "router" if pod["metadata"].get("labels", {}).get(L.ROLE) == "router" else "engine"
    names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    return wanted if wanted in names or not names else str(names[0])


def _log_status(pod: dict[str, Any]) -> dict[str, Any]:
    name = _log_container(pod)
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status: dict[str, Any] = next((c for c in statuses if c.get("name") == name), {})
    return status


def _started(pod: dict[str, Any]) -> bool:
    """False only when the log container is known to be waiting for its first run (no status
    yet: asked all the same); a crash-looping one has the log of its last run."""
    status = _log_status(pod)
    waiting = "waiting" in (status.get("state") or {})
    return not waiting or bool((status.get("lastState") or {}).get("terminated"))


def _log_source(pod: dict[str, Any]) -> base.LogSource:
    """A pod as a log source; a container that ran before (restarted) has a previous log."""
    status = _log_status(pod)
    terminated = (status.get("lastState") or {}).get("terminated")
    return base.LogSource(
        name=pod["metadata"]["name"],
        role=pod["metadata"].get("labels", {}).get(L.ROLE, "engine"),
        restarts=int(status.get("restartCount") or 0),
        has_previous=bool(terminated),
    )


def _role(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(L.ROLE)


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _failed_for_another_revision(current: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """A download Job that gave up while another revision was placed: this one gets a fresh try
    (one that failed for this very revision stays, and its rollout stays failed)."""
    if manifest["kind"] != "Job" or job_failed(current) is None:
        return False
    revision = ((current.get("metadata") or {}).get("labels") or {}).get(L.REVISION)
    return bool(revision != manifest["metadata"]["labels"].get(L.REVISION))


# The claim spec fields ``render.model_cache_claim`` may set.
_CLAIM_FIELDS = ("accessModes", "resources", "storageClassName")


def _keeping_claim_spec(manifest: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """``manifest`` with the live claim's spec fields in place of those it renders. A claim's
    spec cannot change once made: the API server refuses (422) another storage class or access
    mode, and another size unless the claim is bound and its class can expand. Changed cache
    settings therefore apply to claims made after them; an endpoint keeps its claim and the
    weights in it, and its labels and annotations still follow each revision.

    Every field is the live one, present or absent as it is live, whatever this pass renders:
    a field this manager applied before and now leaves out is removed by server-side apply
    (a class set, then none: 422 on every pass), and a class where the claim has none is one
    change the server takes (its upgrade path for default classes), moving the claim."""
    live = current.get("spec") or {}
    spec = {key: live[key] for key in _CLAIM_FIELDS if key in live}
    return {**manifest, "spec": spec}


def _config_hash(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(L.CONFIG_HASH)


def set_hash(manifests: list[dict[str, Any]]) -> str:
    """A hash of every rendered object (their config hashes cover their content; kinds and names
    cover what is there at all): equal exactly when apply and prune would change nothing."""
    parts = sorted(
        (m["apiVersion"], m["kind"], m["metadata"]["name"], _config_hash(m) or "")
        for m in manifests
    )
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def _with_set_hash(manifest: dict[str, Any], digest: str) -> dict[str, Any]:
    meta = manifest["metadata"]
    annotations = {**meta.get("annotations", {}), L.SET_HASH: digest}
    return {**manifest, "metadata": {**meta, "annotations": annotations}}


def _set_hash(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(L.SET_HASH)
