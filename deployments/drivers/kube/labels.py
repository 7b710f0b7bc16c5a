"""Names and labels of everything Plinth puts on a cluster for one endpoint.

Every object carries ``app.kubernetes.io/managed-by=plinth`` plus the endpoint id and the revision
number, so Plinth can find its own objects and refuse to touch anyone else's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MANAGED_BY = "app.kubernetes.io/managed-by"
NAME = "app.kubernetes.io/name"
COMPONENT = "app.kubernetes.io/component"
PLINTH = "plinth"
DEPLOYMENT = "plinth.dev/deployment"
REVISION = "plinth.dev/revision"
ROLE = "plinth.dev/role"
CONFIG_HASH = "plinth.dev/config-hash"
# On one object per endpoint (its last Service rendered): the hash of every object its last complete
# apply rendered, so a settled pass reads that one object and writes nothing.
SET_HASH = "plinth.dev/set-hash"
API_KEY_DIGEST = "plinth.dev/api-key-digest"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
# Set by LWS on every pod of one group (a multi-node replica), unique per group.
LWS_GROUP_KEY = "leaderworkerset.sigs.k8s.io/group-key"
# Set by LWS's pod webhook on every pod of a group: the group's pod count.
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
# The catalogue GPU type an engine pod was placed for (an unschedulable pod's reason names it).
GPU = "plinth.dev/gpu"
# On an engine pod of an endpoint with a warm pool (``render.warm``): "true" while the pool keeps
# it released, "false" once asked back (absent: never warm). The worker writes it, the pod's
# agent reads it. And the ReplicaSet controller's own key, which pods it removes first.
WARM = "plinth.dev/warm"
# When the worker last turned a pool's pod warm or back (epoch seconds): its timeline line's key.
WARM_AT = "plinth.dev/warm-at"
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
# The role of an endpoint's weights download Job (``render.weights_job``).
WEIGHTS = "weights"
# The DaemonSet that pre-stages an endpoint's weights on its GPU type's nodes, and the label of
# its pods (not ``DEPLOYMENT``: they are never replicas).
PRESTAGE = "prestage"
PRESTAGE_OF = "plinth.dev/prestage-of"
# A benchmark's objects (``benchmark_job``): which benchmark, and of which endpoint. Not
# ``DEPLOYMENT``: they are not the endpoint's revision, so its apply must not prune them nor its
# observe count their pod as a replica; only the endpoint's delete takes them too.
BENCHMARK = "plinth.dev/benchmark"
BENCHMARK_OF = "plinth.dev/benchmark-of"
QUANTIZATION = "plinth.dev/quantization"  # the run id of a quantization Job's objects
# Set by the Job controller on every pod of one Job (Kubernetes 1.27+): the Job's uid.
JOB_UID = "batch.kubernetes.io/controller-uid"


def owner_selector(deployment_id: str) -> dict[str, str]:
    return {MANAGED_BY: PLINTH, DEPLOYMENT: deployment_id}


def benchmark_selector(deployment_id: str) -> dict[str, str]:
    """The objects of this endpoint's benchmarks (``BENCHMARK``)."""
    return {MANAGED_BY: PLINTH, BENCHMARK_OF: deployment_id}


def weights_selector(deployment_id: str) -> dict[str, str]:
    """This endpoint's weights download Jobs (not a benchmark's, which is its Job too)."""
    return {**owner_selector(deployment_id), ROLE: WEIGHTS}


def role_selector(deployment_id: str, role: str) -> dict[str, str]:
    return {DEPLOYMENT: deployment_id, ROLE: role}


def object_labels(slug: str, deployment_id: str, revision: int, role: str) -> dict[str, str]:
    return {
        MANAGED_BY: PLINTH,
        "app.kubernetes.io/name": "smg" if role == "router" else "sglang",
        "app.kubernetes.io/instance": slug,
        "app.kubernetes.io/component": role,
        DEPLOYMENT: deployment_id,
        REVISION: str(revision),
        ROLE: role,
    }


def platform_labels(component: str) -> dict[str, str]:
    """The labels of Plinth's own pods (k8s/base): ``gateway``, ``worker``, ``web``..."""
    return {NAME: PLINTH, COMPONENT: component}


def is_ours(obj: Mapping[str, Any], deployment_id: str) -> bool:
    """Plinth's and this endpoint's: the only objects apply and delete may change."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY) == PLINTH and labels.get(DEPLOYMENT) == deployment_id


def object_name(slug: str, role: str) -> str:
    return f"{slug}-{role}"
