"""Pods, events, Jobs and Deployments -> facts: one ReplicaFacts per engine replica, the events
worth a timeline line, the revisions that will not become ready.

Pure functions over plain dicts as the API returns them. Kubernetes' reasons map to what a person
needs to act on: Unschedulable (with the scheduler's own message), ImagePullBackOff,
CrashLoopBackOff, OOMKilled, failing probes, a startup that ran out of time, and a weights
download Job that failed (its condition's reason and message, and its last pod's last words),
which its revision's engines, waiting in ``wait-for-weights``, would otherwise wait for forever,
and a rollout the Deployment controller gave up on (``ProgressDeadlineExceeded``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from ipaddress import ip_address
from typing import Any

from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.egress import EgressPolicy, address_problem
from runtime import startup

PULL_ERRORS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName"})
CONFIG_ERRORS = frozenset({"CreateContainerConfigError", "CreateContainerError"})
WARNING_REASONS = frozenset(
    {"FailedScheduling", "BackOff", "Unhealthy", "Failed", "FailedMount", "Killing", "OOMKilling"}
)


def _container(pod: Mapping[str, Any], name: str) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == name), statuses[0] if statuses else {})


def _condition(pod: Mapping[str, Any], kind: str) -> dict[str, Any]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == kind), {})


def _revision(pod: Mapping[str, Any]) -> int | None:
    value = (pod.get("metadata") or {}).get("labels", {}).get(L.REVISION)
    return int(value) if value and value.isdigit() else None


def replica_facts(
    pod: Mapping[str, Any], probe_failures: Mapping[str, str] | None = None
) -> base.ReplicaFacts:
    """The facts of one pod (the leader's for a multi-node group)."""
    meta = pod.get("metadata") or {}
    role = meta.get("labels", {}).get(L.ROLE, "engine")
    container = _container(pod, "router" if role == "router" else "engine")
    common = {
        "name": meta.get("name", ""),
        "revision": _revision(pod),
        "role": role,
        "restarts": int(container.get("restartCount") or 0),
        "url": _pod_url(pod),
    }
    phase, reason, message = _phase(pod, container)
    if reason == "Unschedulable":
        message = _unschedulable(pod, message)
    probe = (probe_failures or {}).get(meta.get("name", ""))
    if probe and phase in {base.LOADING, base.RUNNING} and not reason:
        reason, message = "ProbeFailed", probe
    if role == "engine":
        phase, reason, message = _warm_pool_phase(pod, phase, reason, message)
    ready = phase == base.READY
    return base.ReplicaFacts(
        phase=phase,
        ready=ready,
        reason=reason,
        message=message,
        milestones=start_milestones(pod) if role != "router" else {},
        **common,
    )


_WARM_UNTOUCHED = frozenset({base.PENDING, base.FAILED, base.TERMINATING})


def _warm_pool_phase(
    pod: Mapping[str, Any], phase: str, reason: str, message: str
) -> tuple[str, str, str]:
    """A warm pool's pod (``kube.warm``) as its annotation and its agent say: released while
    the pool keeps it (serving nothing, whatever its engine's probe still says), resuming once
    asked back until its agent reports it ready again."""
    warm = ((pod.get("metadata") or {}).get("annotations") or {}).get(L.WARM)
    if warm is None or phase in _WARM_UNTOUCHED:
        return phase, reason, message
    if warm == "true":
        return base.RELEASED, "WarmPool", "GPU memory released; resumes on the next scale-up"
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    agent: Mapping[str, Any] = next((c for c in statuses if c.get("name") == "warm-agent"), {})
    if phase == base.READY and agent.get("ready", True):
        return phase, reason, message
    return base.RESUMING, "WarmPool", "resuming from the warm pool (no cold start)"


def _epoch(stamp: object) -> float | None:
    """An RFC 3339 time as the API writes it (``2026-01-01T00:00:00Z``) -> epoch seconds."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _true_since(pod: Mapping[str, Any], kind: str) -> float | None:
    condition = _condition(pod, kind)
    return (
        _epoch(condition.get("lastTransitionTime")) if condition.get("status") == "True" else None
    )


def _started(status: Mapping[str, Any]) -> float | None:
    state = status.get("state") or {}
    run = state.get("running") or state.get("terminated") or {}
    return _epoch(run.get("startedAt"))


def start_milestones(pod: Mapping[str, Any]) -> dict[str, float]:
    """The pod's start as Kubernetes tells it (``runtime.startup``): created, the scheduler's
    PodScheduled, the image pulled (its first container started: the weights init container,
    which runs the engine's image, or the engine), the weights in the node's cache (its init
    containers finished: a download, or the wait for the download Job's marker) and Ready.
    A container restarted in place is the same start (the pod's), recorded once."""
    status = pod.get("status") or {}
    inits = status.get("initContainerStatuses") or []
    engine = _container(pod, "engine")
    found: dict[str, float | None] = {
        startup.CREATED: _epoch((pod.get("metadata") or {}).get("creationTimestamp")),
        startup.SCHEDULED: _true_since(pod, "PodScheduled"),
    }
    starts = [t for t in (_started(c) for c in [*inits, engine]) if t is not None]
    found[startup.IMAGE_PULLED] = min(starts) if starts else None
    finished = [
        _epoch(((c.get("state") or {}).get("terminated") or {}).get("finishedAt")) for c in inits
    ]
    if inits and all(f is not None for f in finished):
        found[startup.WEIGHTS_DOWNLOADED] = max(f for f in finished if f is not None)
    found[startup.READY] = _true_since(pod, "Ready")
    return {phase: at for phase, at in found.items() if at is not None}


def _unschedulable(pod: Mapping[str, Any], message: str) -> str:
    """The scheduler's message led by the GPU type and count the pod waits for: "0/5 nodes are
    available: 3 node(s) didn't match Pod's node affinity" alone does not say which GPUs.
    When nodes were passed over for a taint, the head says where tolerations are set instead:
    the scheduler names no taint ("3 node(s) had untolerated taint(s)"), and free GPUs are
    not what is missing."""
    gpu = (pod.get("metadata") or {}).get("labels", {}).get(L.GPU)
    if not gpu:
        return message
    spec = (pod.get("spec") or {}).get("containers") or []
    limits = next((c.get("resources", {}).get("limits") or {} for c in spec), {})
    count = next((v for k, v in limits.items() if k.endswith("/gpu")), "")
    wanted = f"{count} free {gpu} GPU(s)" if count else f"{gpu} GPUs"
    head = f"no node with {wanted} can take this replica"
    if "untolerated taint" in message:
        head += (
            ", and nodes have a taint its pods do not tolerate (the cluster's settings "
            "gpu_tolerations and tolerations say which they tolerate)"
        )
    return f"{head}: {message}" if message else head


def _phase(pod: Mapping[str, Any], container: Mapping[str, Any]) -> tuple[str, str, str]:
    """(phase, reason, message) of a pod, worst news first."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return base.TERMINATING, "", ""
    status = pod.get("status") or {}
    waiting = (container.get("state") or {}).get("waiting") or {}
    last = (container.get("lastState") or {}).get("terminated") or {}
    w_reason = waiting.get("reason", "")
    if status.get("phase") in {"Failed", "Succeeded"}:
        return base.FAILED, status.get("reason") or "PodFailed", status.get("message", "")
    if w_reason == "CrashLoopBackOff":
        reason = "OOMKilled" if last.get("reason") == "OOMKilled" else "CrashLoopBackOff"
        # The kubelet's back-off line, and how the last run ended, which it does not say.
        exit_code = last.get("exitCode")
        detail = f"last exit code {exit_code}" if exit_code is not None else ""
        said = "; ".join(part for part in (waiting.get("message", ""), detail) if part)
        return base.FAILED, reason, said
    if w_reason in PULL_ERRORS:
        return base.FAILED, "ImagePullBackOff", waiting.get("message", "")
    if w_reason in CONFIG_ERRORS:
        return base.FAILED, w_reason, waiting.get("message", "")
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False":
        return base.PENDING, scheduled.get("reason") or "Pending", scheduled.get("message", "")
    if status.get("phase") == "Pending" or not container:
        return base.STARTING, w_reason, waiting.get("message", "")
    if container.get("ready"):
        return base.READY, "", ""
    if last.get("reason") == "OOMKilled":
        return (
            base.LOADING,
            "OOMKilled",
            f"restarted after running out of memory ({last.get('exitCode')})",
        )
    # Running, not ready: loading weights until the startup probe passes, then unready.
    return (base.RUNNING if container.get("started") else base.LOADING), "", ""


# The probe calls a pod's address, which the tenant's cluster reports (and its admin can write):
# pods live on private ranges, but loopback, link-local and metadata addresses are never called.
_POD_EGRESS = EgressPolicy(allow_private=True)


def _pod_url(pod: Mapping[str, Any]) -> str:
    try:
        address = ip_address(str((pod.get("status") or {}).get("podIP") or ""))
    except ValueError:
        return ""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    port = ((containers[0].get("ports") or [{}])[0]).get("containerPort", 30000)
    if address_problem(address, _POD_EGRESS) or type(port) is not int or not 0 < port < 65536:
        return ""
    host = f"[{address}]" if address.version == 6 else str(address)
    return f"http://{host}:{port}"


def is_replica(pod: Mapping[str, Any]) -> bool:
    """Leaders of multi-node groups and every single-node pod; LWS workers fold into leaders."""
    index = (pod.get("metadata") or {}).get("labels", {}).get(L.LWS_WORKER_INDEX)
    return index in (None, "0")


def group_facts(
    leader: base.ReplicaFacts, ranks: Iterable[base.ReplicaFacts], size: int = 1
) -> base.ReplicaFacts:
    """A multi-node replica as its leader's facts, unless another rank of its group (``ranks``:
    the facts of ranks >= 1) is not ready while the leader is, or has news the leader lacks: a
    group serves only once every rank runs (the leader waits for the rest), so a worker that
    the scheduler cannot place or that crashes makes the replica not ready, with its words.
    ``size`` is the group's pod count: LWS creates the workers only after the leader (through
    the leader's own StatefulSet), so a ready leader whose workers do not exist yet is a
    group still starting, not a ready one."""
    ranks = list(ranks)
    missing = size - 1 - len(ranks)
    if leader.ready and missing > 0:
        message = f"{missing} of {size - 1} worker pod(s) not created yet"
        return replace(leader, phase=base.LOADING, ready=False, message=message)
    waiting = [r for r in ranks if not r.ready]
    if not waiting or (not leader.ready and leader.reason):
        return leader
    worst = next((r for r in waiting if r.reason), waiting[0])
    message = f"{worst.name}: {worst.message}" if worst.message else worst.name
    return replace(leader, phase=worst.phase, ready=False, reason=worst.reason, message=message)


def probe_failures(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The latest probe failure message per pod name."""
    failures: dict[str, str] = {}
    for event in events:
        if event.get("reason") == "Unhealthy":
            name = (event.get("involvedObject") or {}).get("name", "")
            failures[name] = event.get("message", "")
    return failures


def timeline_events(
    events: Iterable[Mapping[str, Any]], pod_roles: Mapping[str, str]
) -> list[base.ObservedEvent]:
    """Kubernetes events about this endpoint's pods (``pod_roles``: name -> role), as timeline
    lines (deduped by uid). The line of a split endpoint's pool or router pod leads with the
    role ("decode: chat-decode-0: Back-off restarting..."): pod names alone do not say which
    pool is in trouble."""
    lines: list[base.ObservedEvent] = []
    for event in events:
        involved = event.get("involvedObject") or {}
        role = pod_roles.get(str(involved.get("name")))
        if role is None:
            continue
        reason = event.get("reason", "")
        level = "warning" if event.get("type") == "Warning" or reason in WARNING_REASONS else "info"
        meta = event.get("metadata") or {}
        # One line per event object: a repeating warning (BackOff) is not repeated in the timeline.
        key = f"k8s:{meta.get('uid') or meta.get('name')}"
        message = f"{involved.get('name')}: {event.get('message', '')}"
        if role != "engine":
            message = f"{role}: {message}"
        lines.append(base.ObservedEvent(reason=reason[:64], message=message, level=level, key=key))
    return lines


def warm_pool_events(pods: Iterable[Mapping[str, Any]]) -> list[base.ObservedEvent]:
    """The timeline's lines of a warm pool's pods (``kube.warm``): each time the worker turned
    one warm or asked it back, once (keyed by when)."""
    lines = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        annotations, name = meta.get("annotations") or {}, meta.get("name", "")
        at = annotations.get(L.WARM_AT)
        if at is None:
            continue
        if annotations.get(L.WARM) == "true":
            message = f"{name} left service for the warm pool; its GPU memory is released"
            lines.append(base.ObservedEvent("Released", message, "info", f"kube:{name}:r:{at}"))
        else:
            message = f"{name} resumed from the warm pool (no cold start)"
            lines.append(base.ObservedEvent("Resumed", message, "info", f"kube:{name}:s:{at}"))
    return lines


def job_failed(job: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Job's ``Failed`` condition once it has given up (backoff limit, deadline), else None."""
    conditions = (job.get("status") or {}).get("conditions") or []
    return next(
        (c for c in conditions if c.get("type") == "Failed" and c.get("status") == "True"), None
    )


def download_failures(
    jobs: Iterable[Mapping[str, Any]], job_pods: Iterable[Mapping[str, Any]]
) -> list[base.RevisionFailure]:
    """The revisions whose weights download Job failed, each with the Job's reason and message
    and what its last failed pod said (``job_pods``: the pods of those Jobs). A Job fails the
    revision its label names, which apply sets to the revision each pass places."""
    pods = list(job_pods)
    failures = []
    for job in jobs:
        condition = job_failed(job)
        revision = _revision(job)
        if condition is None or revision is None:
            continue
        meta = job.get("metadata") or {}
        said = _last_words([p for p in pods if _labels(p).get(L.JOB_UID) == meta.get("uid")])
        message = f"the weights download (Job {meta.get('name')}) failed: " + (
            condition.get("message") or "it gave up"
        )
        failures.append(
            base.RevisionFailure(
                revision=revision,
                reason=str(condition.get("reason") or "JobFailed")[:64],
                message=f"{message}; {said}" if said else message,
            )
        )
    return failures


# What is kept of a pod's termination message (the last lines of its log, with
# ``FallbackToLogsOnError``): the end, where the error is.
LAST_WORDS_CHARS = 400
# A model hub token, should a failing tool ever print one.
_HUB_TOKEN = re.compile(r"hf_[A-Za-z0-9]{8,}")


def _last_words(pods: list[Mapping[str, Any]]) -> str:
    """What the newest failed pod of a Job says about its failure: a container's exit code,
    reason and termination message, else the pod's own reason (evicted, past its deadline)."""
    failed = [p for p in pods if (p.get("status") or {}).get("phase") == "Failed"]
    if not failed:
        return ""
    pod = max(failed, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        ended = (container.get("state") or {}).get("terminated") or {}
        ended = ended or (container.get("lastState") or {}).get("terminated") or {}
        if not ended or ended.get("exitCode") == 0:
            continue
        head = f"{container.get('name')} exited with code {ended.get('exitCode')}"
        if ended.get("reason") and ended.get("reason") != "Error":
            head += f" ({ended['reason']})"
        text = _tail(str(ended.get("message") or ""))
        return f"{head}: {text}" if text else head
    reason, message = status.get("reason") or "", _tail(str(status.get("message") or ""))
    return ": ".join(part for part in (reason, message) if part)


def _tail(text: str) -> str:
    """The end of ``text`` on one line, any key or token in it masked."""
    flat = " ".join(" ".join(base.clean_log_line(line) for line in text.split("\n")).split())
    flat = _HUB_TOKEN.sub("hf_***", flat)
    return flat if len(flat) <= LAST_WORDS_CHARS else "…" + flat[-LAST_WORDS_CHARS:]


PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"


def stalled(workload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Deployment's ``Progressing`` condition once the Deployment controller has given up
    on its rollout (``ProgressDeadlineExceeded``: no new pod became ready within
    ``progressDeadlineSeconds``), else None. Only a condition about the template now applied
    counts: one the controller wrote before the last change (``observedGeneration`` behind)
    is about the previous revision."""
    meta, status = workload.get("metadata") or {}, workload.get("status") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return None
    conditions = status.get("conditions") or []
    return next(
        (
            c
            for c in conditions
            if c.get("type") == "Progressing"
            and c.get("status") == "False"
            and c.get("reason") == PROGRESS_DEADLINE_EXCEEDED
        ),
        None,
    )


def stalled_rollouts(
    workloads: Iterable[Mapping[str, Any]], replicas: Iterable[base.ReplicaFacts]
) -> list[base.RevisionFailure]:
    """The revisions whose Deployment the controller says stopped progressing, in its words
    ("ReplicaSet "chat-engine-7d9" has timed out progressing."), with what the revision's
    replicas last said when they say anything (the controller does not say why)."""
    replicas = list(replicas)
    failures = []
    for workload in workloads:
        condition, revision = stalled(workload), _revision(workload)
        if condition is None or revision is None:
            continue
        message = f"Deployment {_name(workload)}: {condition.get('message') or 'no progress'}"
        said = next((r for r in replicas if r.revision == revision and r.reason), None)
        if said is not None:
            message += f" (its replicas: {said.reason}" + (
                f": {said.message})" if said.message else ")"
            )
        failures.append(base.RevisionFailure(revision, PROGRESS_DEADLINE_EXCEEDED, message))
    return failures


def stall_events(workloads: Iterable[Mapping[str, Any]]) -> list[base.ObservedEvent]:
    """A timeline line per stalled Deployment, once per time the controller said so."""
    lines = []
    for workload in workloads:
        condition = stalled(workload)
        if condition is None:
            continue
        meta = workload.get("metadata") or {}
        key = f"k8s:stalled:{meta.get('uid')}:{condition.get('lastTransitionTime')}"
        message = f"{_name(workload)}: {condition.get('message') or 'no progress'}"
        lines.append(
            base.ObservedEvent(PROGRESS_DEADLINE_EXCEEDED, message, level="warning", key=key)
        )
    return lines


def observation(
    pods: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    router_url: str,
    jobs: Iterable[Mapping[str, Any]] = (),
    job_pods: Iterable[Mapping[str, Any]] = (),
    workloads: Iterable[Mapping[str, Any]] = (),
) -> base.Observation:
    """``jobs``: the endpoint's weights download Jobs; ``job_pods``: the pods of those that
    failed (read only then); ``workloads``: its Deployments, whose controller's conditions
    say when a rollout stopped progressing."""
    pods = list(pods)
    events = list(events)
    workloads = list(workloads)
    failures = probe_failures(events)
    # Ranks >= 1 of each multi-node group, by the group key LWS puts on all of its pods.
    ranks: dict[str, list[base.ReplicaFacts]] = {}
    for pod in pods:
        if not is_replica(pod) and _group(pod):
            ranks.setdefault(_group(pod), []).append(replica_facts(pod, failures))
    facts = [
        group_facts(replica_facts(p, failures), ranks.get(_group(p), []), _group_size(p))
        if _group(p)
        else replica_facts(p, failures)
        for p in pods
        if is_replica(p)
    ]
    engines = tuple(sorted((f for f in facts if f.role != "router"), key=lambda f: f.name))
    routers = [f for f in facts if f.role == "router"]
    roles = {_name(p): _role(p) for p in pods}
    return base.Observation(
        replicas=engines,
        router_url=router_url if routers else "",
        router_ready=any(r.ready for r in routers),
        events=(
            *timeline_events(events, roles),
            *stall_events(workloads),
            *warm_pool_events(p for p in pods if _role(p) == "engine"),
        ),
        failures=(*download_failures(jobs, job_pods), *stalled_rollouts(workloads, engines)),
    )


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _group(pod: Mapping[str, Any]) -> str:
    return _labels(pod).get(L.LWS_GROUP_KEY, "")


def _group_size(pod: Mapping[str, Any]) -> int:
    """The pod count of a multi-node group, from the annotation LWS's pod webhook sets on
    each of its pods (1 when absent or not a number: then no rank is counted missing)."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(L.LWS_SIZE, "")
    return int(value) if value.isdigit() else 1


def _name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", ""))


def _role(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get(L.ROLE) or "engine")
