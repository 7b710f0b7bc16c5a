"""A warm pool on Kubernetes, the worker's side: how many pods the engine Deployment keeps beyond
the wanted count, which of them serve and which stay warm, written as pod annotations.

As on the local driver, only replicas that already ran are kept warm (a scale-down leaves up to
``warm_replicas`` of its pods loaded instead of removing them); none is started for the pool. So
the Deployment runs ``wanted + kept`` pods, ``kept = min(warm_replicas, pods now - wanted)``.

Which pods serve: those already serving first, then ready ones, then the oldest (the same pods
pass after pass); of the others the pool keeps those already warm first. The others get
``plinth.dev/warm: "true"`` (their agent takes them out of service and releases their GPU
memory: ``render.warm``); a warm pod asked back gets ``"false"``, which its agent resumes. Each
pod also gets ``controller.kubernetes.io/pod-deletion-cost``, which
the ReplicaSet controller reads when the count drops: pods that serve cost the most to remove,
the pool's warm pods less, a pod still on its first start (no annotation, 0) less than a loaded
warm one, and the pods beyond the pool least, so they are the ones removed. The controller
ranks readiness before the cost (an unready pod goes before a ready one whatever its cost), so
a pool's warm pod, unready, goes before a ready surplus pod when both are candidates; the pool
then keeps another loaded pod in its place, the count it promises being what matters.

The annotations are written before the lower count is applied, so the controller sees them when
it picks (the patch and the apply are separate calls; a controller that acted in between picks
by its other rules, and the next pass marks whatever pods are left).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from deployments.drivers.kube import labels as L

SERVING_COST = "200"
WARM_COST = "100"
SURPLUS_COST = "-100"


@dataclass(frozen=True)
class PoolPlan:
    """The engine pods' parts: ``kept`` warm pods beside the serving ones; annotations by pod."""

    kept: int
    annotations: dict[str, dict[str, str]]


def _annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    return dict((pod.get("metadata") or {}).get("annotations") or {})


def is_warm(pod: Mapping[str, Any]) -> bool:
    return _annotations(pod).get(L.WARM) == "true"


def _ready(pod: Mapping[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _serve_rank(pod: Mapping[str, Any]) -> tuple[bool, bool, str, str]:
    """Which pods serve first: serving ones, ready ones, the oldest."""
    meta = pod.get("metadata") or {}
    return is_warm(pod), not _ready(pod), meta.get("creationTimestamp") or "", meta.get("name", "")


def _keep_rank(pod: Mapping[str, Any]) -> tuple[bool, bool, str, str]:
    """Which of the others the pool keeps first: warm ones (released already), then as above."""
    _, unready, created, name = _serve_rank(pod)
    return not is_warm(pod), unready, created, name


def live_pods(pods: Iterable[Mapping[str, Any]], revision: int) -> list[Mapping[str, Any]]:
    """The engine pods of ``revision`` that count: not leaving, not failed."""
    found = []
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        labels = meta.get("labels") or {}
        if labels.get(L.ROLE) != "engine" or labels.get(L.REVISION) != str(revision):
            continue
        if meta.get("deletionTimestamp") or status.get("phase") in {"Failed", "Succeeded"}:
            continue
        found.append(pod)
    return found


def plan_pool(
    pods: list[Mapping[str, Any]], wanted: int, warm_replicas: int, now: float = 0.0
) -> PoolPlan:
    """The pool for ``pods`` (``live_pods``) when ``wanted`` should serve; only the annotations
    that differ from the pods' own are in the plan. A pod the pool keeps or asks back carries
    when (``now``), for its timeline line; one on its way out does not."""
    kept = min(warm_replicas, max(0, len(pods) - wanted))
    changes: dict[str, dict[str, str]] = {}
    ordered = sorted(pods, key=_serve_rank)
    ordered = ordered[:wanted] + sorted(ordered[wanted:], key=_keep_rank)
    for index, pod in enumerate(ordered):
        current = _annotations(pod)
        if index < wanted:
            # Asked back from the pool: "false" tells its agent to resume it.
            want = {L.DELETION_COST: SERVING_COST}
            if L.WARM in current:
                want[L.WARM] = "false"
        elif index < wanted + kept:
            want = {L.WARM: "true", L.DELETION_COST: WARM_COST}
        else:
            want = {L.WARM: "true", L.DELETION_COST: SURPLUS_COST}
        differing = {k: v for k, v in want.items() if current.get(k) != v}
        if L.WARM in differing and want[L.DELETION_COST] != SURPLUS_COST:
            differing[L.WARM_AT] = f"{now:.3f}"
        if differing:
            changes[(pod.get("metadata") or {}).get("name", "")] = differing
    return PoolPlan(kept, changes)
