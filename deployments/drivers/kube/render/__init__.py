"""Pure renderers: a revision's LaunchPlan -> the plain-dict manifests of one endpoint.

No client, no I/O: every function here is a function of its arguments, so manifests are tested
against the Kubernetes schemas without a cluster. Per engine role: a Deployment (a LeaderWorkerSet
when one replica spans nodes) with a rolling update that surges one replica and never takes a
ready one away, a Service and a PodDisruptionBudget. For the router: smg discovering engine pods by
label, with the ServiceAccount, Role and RoleBinding that lets it list pods, and its Service. A
Secret carries the model hub token when the model is gated.

Weights are downloaded into the cluster's model cache once (``hf download`` from the engine
image, which ships huggingface_hub): per claim by a Job per endpoint and set of models, which
writes a marker when done and which engine pods wait for (an init container that waits for the
marker); per node for a hostPath cache by an init container of the engine pod that downloads
only when the marker is absent. The hub token Secret reaches only those downloaders; engines
then load from the cache offline. Only without a shared cache (``model_cache: none``) does the
engine download, and get the token, itself.

Fences: a Secret holds the endpoint's API key, which engines and the router get as ``--api-key
$(PLINTH_API_KEY)`` (Kubernetes expands the reference from the Secret at start, so the key is in
no manifest); two NetworkPolicies let only the endpoint's own pods reach its engines (router,
and the other ranks and pools for NCCL and KV transfer) plus the worker's probe on the HTTP
port, and only the gateway and the worker reach its router. Pods run with a read-only root
filesystem (writable: the model cache, /dev/shm and an emptyDir /tmp); the router as non-root,
engines as the user ``engine_run_as_user`` names (the SGLang image runs as root). Those and the
namespaces the fences let in are the cluster's settings (``ClusterSettings``).

By object family: ``weights`` (the cache claim, the download Job, an engine pod's init
containers), ``metadata`` (what every object carries, the Secrets), ``network`` (the fences),
``pods`` (the parts every pod shares), ``engines`` (an engine role's workload, Service and
budget), ``warm`` (a warm pool's in-pod agent), ``router``; ``options`` holds what they are
all given. Here: the one entry point,
``render_revision``, and the names the driver and tests import.
"""

from __future__ import annotations

from typing import Any

from deployments.cluster_settings import SharedClaimCache
from deployments.drivers.base import DeploymentRef, RevisionPlan
from deployments.drivers.kube.render.engines import (
    LWS_API_VERSION,
    PRESTOP_SLEEP_S,
    disruption_budget,
    engine_service,
    engine_workload,
)
from deployments.drivers.kube.render.metadata import (
    HF_TOKEN_KEY,
    api_key_secret,
    hf_token_secret,
    with_config_hash,
    with_operator_metadata,
)
from deployments.drivers.kube.render.network import engine_network_policy, router_network_policy
from deployments.drivers.kube.render.options import KubeOptions
from deployments.drivers.kube.render.pods import cpu_pod_scheduling
from deployments.drivers.kube.render.router import (
    ROUTER_USER,
    router_deployment,
    router_rbac,
    router_service,
    router_url,
)
from deployments.drivers.kube.render.warm import agent_config_map, has_warm_pool
from deployments.drivers.kube.render.weights import (
    download_by_job,
    model_cache_claim,
    prestage_daemonset,
    prestages,
    weights_job,
)
from deployments.drivers.kube.weights import weights_of
from runtime.secret_flags import API_KEY_ENV

__all__ = [
    "API_KEY_ENV",
    "HF_TOKEN_KEY",
    "LWS_API_VERSION",
    "PRESTOP_SLEEP_S",
    "ROUTER_USER",
    "KubeOptions",
    "cpu_pod_scheduling",
    "render_revision",
    "router_url",
    "with_operator_metadata",
]


def render_revision(
    ref: DeploymentRef, revision: RevisionPlan, options: KubeOptions | None = None
) -> list[dict[str, Any]]:
    """Every object of ``ref`` at ``revision``, in apply order (dependencies first)."""
    options = options or KubeOptions()
    objects: list[dict[str, Any]] = []
    if isinstance(options.cluster.model_cache, SharedClaimCache):
        objects.append(model_cache_claim(ref, revision, options.cluster.model_cache))
    if revision.hf_token:
        objects.append(hf_token_secret(ref, revision))
    if ref.api_key:
        objects.append(api_key_secret(ref, revision))
    weights = weights_of(revision)
    if weights and download_by_job(options.cluster):
        objects.append(weights_job(ref, revision, weights, options))
    if prestages(revision, options.cluster):
        objects.append(prestage_daemonset(ref, revision, options))
    engines = [r for r in revision.plan.roles if r.role != "router"]
    if engines:
        objects.append(engine_network_policy(ref, revision, engines[0].port, options))
    if any(has_warm_pool(revision, role) for role in engines):
        objects.append(agent_config_map(ref, revision))
    for role in engines:
        objects.append(engine_workload(ref, revision, role, options))
        objects.append(engine_service(ref, revision, role))
        objects.append(disruption_budget(ref, revision, role))
    router = revision.plan.role("router")
    if router is not None:
        objects.append(router_network_policy(ref, revision, router, options))
        objects += router_rbac(ref, revision)
        objects.append(router_deployment(ref, revision, router, engines, options))
        objects.append(router_service(ref, revision, router))
    return [with_config_hash(with_operator_metadata(o, options.cluster)) for o in objects]
