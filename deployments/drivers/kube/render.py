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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deployments.cluster_settings import (
    ClaimCache,
    ClusterSettings,
    HostPathCache,
    NoCache,
    SharedClaimCache,
)
from deployments.drivers.base import HF_TOKEN_ENV, DeploymentRef, RevisionPlan
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.weights import DOWNLOAD_SCRIPT, WAIT_SCRIPT, Weights, weights_of
from runtime.launch import DIST_INIT_PORT, ROUTER_IMAGE, Probe, RolePlan, with_flag
from runtime.secret_flags import API_KEY_ENV, API_KEY_REF, container_command
from runtime.spec import MODEL_CACHE_PATH, default_engine_image

HF_TOKEN_KEY = HF_TOKEN_ENV  # the Secret's key, named as the variable it becomes
ROUTER_USER = 65532  # smg needs no user of its own: any non-root id
PRESTOP_SLEEP_S = 15  # lets the router see the pod go unready before the engine drains
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"


@dataclass(frozen=True)
class KubeOptions:
    """Per-cluster choices an operator makes once."""

    # What the cluster's admin saved (GPU map, tolerations, images, model cache, fences, extra
    # labels): validated when saved, so rendering never needs to refuse it. The platform
    # namespace is where k8s/base runs the gateway and worker (labelled
    # app.kubernetes.io/component=gateway|worker).
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    # The installation's default AIPerf image for benchmark Jobs (PLINTH_BENCHMARK_IMAGE, as set:
    # checked when a benchmark runs, so a mistake in it fails benchmarks only); "": Plinth's.
    benchmark_image: str = ""


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
    if weights and _download_by_job(options.cluster):
        objects.append(weights_job(ref, revision, weights, options))
    engines = [r for r in revision.plan.roles if r.role != "router"]
    if engines:
        objects.append(engine_network_policy(ref, revision, engines[0].port, options))
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


# --- weights -------------------------------------------------------------------------------


def _download_by_job(cluster: ClusterSettings) -> bool:
    """A claim is shared by every node: one Job downloads for all of them."""
    return isinstance(cluster.model_cache, ClaimCache | SharedClaimCache)


def _engine_downloads(cluster: ClusterSettings) -> bool:
    """No shared cache: the engine downloads (and needs the hub token) itself."""
    return isinstance(cluster.model_cache, NoCache)


def _hf_token_env(ref: DeploymentRef) -> dict[str, Any]:
    secret = {"name": L.object_name(ref.slug, "hf-token"), "key": HF_TOKEN_KEY}
    return {"name": HF_TOKEN_KEY, "valueFrom": {"secretKeyRef": secret}}


def _cache_env() -> list[dict[str, Any]]:
    # The root filesystem is read-only: huggingface_hub, Triton, FlashInfer and torch write
    # under $HOME, which /tmp (an emptyDir) stands in for.
    return [
        {"name": "HF_HOME", "value": MODEL_CACHE_PATH},
        {"name": "HOME", "value": "/tmp"},  # noqa: S108 - an emptyDir, not shared
    ]


def _cache_mounts() -> list[dict[str, Any]]:
    return [
        {"name": "model-cache", "mountPath": MODEL_CACHE_PATH},
        {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - a volume mount
    ]


def _weights_container(
    ref: DeploymentRef,
    revision: RevisionPlan,
    name: str,
    weights: Weights,
    image: str,
    cluster: ClusterSettings,
) -> dict[str, Any]:
    """Downloads ``weights`` into the cache unless its marker is there; the one container of
    the endpoint that gets the hub token when a cache is shared."""
    env = [
        *_cache_env(),
        {"name": "PLINTH_WEIGHTS_REPO", "value": literal(weights.repo)},
        {"name": "PLINTH_WEIGHTS_MARKER", "value": literal(weights.marker)},
    ]
    if weights.revision:
        env.append({"name": "PLINTH_WEIGHTS_REVISION", "value": literal(weights.revision)})
    if revision.hf_token:
        env.append(_hf_token_env(ref))
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", literal(DOWNLOAD_SCRIPT)],
        "env": env,
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "8Gi"}},
        "volumeMounts": _cache_mounts(),
        "securityContext": _container_security(
            read_only=cluster.read_only_root, run_as_user=cluster.engine_run_as_user
        ),
    }


def _wait_container(weights: list[Weights], image: str, cluster: ClusterSettings) -> dict[str, Any]:
    """Holds the engine back until the download Job has filled the shared cache: no token,
    no network, the cache read-only."""
    markers = " ".join(w.marker for w in weights)
    return {
        "name": "wait-for-weights",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", literal(WAIT_SCRIPT)],
        "env": [{"name": "PLINTH_WEIGHTS_MARKERS", "value": literal(markers)}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": [{"name": "model-cache", "mountPath": MODEL_CACHE_PATH, "readOnly": True}],
        "securityContext": _container_security(
            read_only=True, run_as_user=cluster.engine_run_as_user
        ),
    }


def _engine_init_containers(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, cluster: ClusterSettings
) -> list[dict[str, Any]]:
    """Per node (a hostPath cache): download unless there already. Per claim: wait for the
    Job. Without a shared cache: nothing, the engine downloads itself."""
    weights = weights_of(revision)
    if not weights or _engine_downloads(cluster):
        return []
    image = engine_image(role, revision, cluster)
    if _download_by_job(cluster):
        return [_wait_container(weights, image, cluster)]
    return [
        _weights_container(ref, revision, f"weights-{at}", w, image, cluster)
        for at, w in enumerate(weights)
    ]


def weights_job(
    ref: DeploymentRef, revision: RevisionPlan, weights: list[Weights], options: KubeOptions
) -> dict[str, Any]:
    """Downloads the weights into the shared claim once; engine pods wait for its markers.

    Named by a digest of its pod template, which Kubernetes never lets change: other models
    (or other download settings) make a new Job, and the old one is pruned. Its pods carry no
    endpoint label, so they are never taken for replicas; deleting the Job (foreground) takes
    them with it.

    A failed download is reported in its own words (``observe.download_failures``): each try is
    a pod of its own (``Never`` restarts in place), kept once failed with its last log lines as
    its termination message. Five tries (about 2.5 min of back-off between them) fit well inside
    the shortest startup window (10 min), so the rollout fails with the download's reason
    rather than with a window that ran out while it was still retrying.
    """
    cluster = options.cluster
    engines = [r for r in revision.plan.roles if r.role != "router"]
    image = engine_image(engines[0], revision, cluster)
    containers = [
        {
            **_weights_container(ref, revision, f"weights-{at}", w, image, cluster),
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
        for at, w in enumerate(weights)
    ]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": containers,
        "volumes": [_cache_volume(ref, cluster), {"name": "tmp", "emptyDir": {}}],
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # it calls the hub, never the cluster
        **_scheduling(cluster),
    }
    if cluster.tolerations:
        pod["tolerations"] = [t.manifest() for t in cluster.tolerations]
    if cluster.engine_run_as_user is not None:
        pod["securityContext"] = {"fsGroup": cluster.engine_run_as_user}
    labels = {
        k: v
        for k, v in L.object_labels(ref.slug, ref.id, revision.number, L.WEIGHTS).items()
        if k not in (L.DEPLOYMENT, L.REVISION, L.ROLE)
    }
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        # Its revision label says which revision's rollout a failure of it fails.
        "metadata": _meta(ref, revision, "", L.WEIGHTS),
        "spec": {"backoffLimit": 4, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }
    job = with_operator_metadata(job, cluster)
    digest = hashlib.sha256(json.dumps(job["spec"], sort_keys=True).encode()).hexdigest()[:10]
    job["metadata"]["name"] = L.object_name(ref.slug, f"weights-{digest}")
    return job


def with_operator_metadata(obj: dict[str, Any], cluster: ClusterSettings) -> dict[str, Any]:
    """``obj`` with the operator's extra labels and annotations on it and on its pod templates.

    Plinth's own keys win (the settings refuse its prefixes anyway): selectors and ownership
    rest on them. Selectors themselves are never touched, so changing these rolls pods but
    never orphans a workload.
    """
    if not cluster.labels and not cluster.annotations:
        return obj
    for meta in (obj["metadata"], *(t["metadata"] for t in _pod_templates(obj))):
        meta["labels"] = {**cluster.labels, **meta.get("labels", {})}
        if cluster.annotations:
            meta["annotations"] = {**cluster.annotations, **meta.get("annotations", {})}
    return obj


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if "template" in spec:
        return [spec["template"]]
    group = spec.get("leaderWorkerTemplate") or {}
    return [group[k] for k in ("leaderTemplate", "workerTemplate") if k in group]


def model_cache_claim(
    ref: DeploymentRef, revision: RevisionPlan, cache: SharedClaimCache
) -> dict[str, Any]:
    """The endpoint's own ReadWriteMany claim for weights: every replica, on any node, reads
    what the first one downloaded. Removed with the endpoint."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": f"{cache.size_gib}Gi"}},
    }
    if cache.storage_class:
        spec["storageClassName"] = cache.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, "model-cache"), "engine"),
        "spec": spec,
    }


def with_config_hash(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` annotated with a hash of its content, so an unchanged object is never re-applied."""
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:32]
    meta = obj["metadata"]
    meta["annotations"] = {**meta.get("annotations", {}), L.CONFIG_HASH: digest}
    return obj


def _meta(ref: DeploymentRef, revision: RevisionPlan, name: str, role: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": L.object_labels(ref.slug, ref.id, revision.number, role),
    }


def hf_token_secret(ref: DeploymentRef, revision: RevisionPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, "hf-token"), "engine"),
        "type": "Opaque",
        "stringData": {HF_TOKEN_KEY: revision.hf_token or ""},
    }


def api_key_secret(ref: DeploymentRef, revision: RevisionPlan) -> dict[str, Any]:
    """The key engines and the router demand of every caller but probes (SGLANG.md 2.1)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, "api-key"), "router"),
        "type": "Opaque",
        "stringData": {API_KEY_ENV: ref.api_key},
    }


def _api_key_env(ref: DeploymentRef) -> list[dict[str, Any]]:
    if not ref.api_key:
        return []
    secret = {"secretKeyRef": {"name": L.object_name(ref.slug, "api-key"), "key": API_KEY_ENV}}
    return [{"name": API_KEY_ENV, "valueFrom": secret}]


def _with_api_key(ref: DeploymentRef, args: list[str]) -> list[str]:
    """``args`` (already escaped) with ``--api-key`` naming the variable the Secret fills. The
    reference is escaped too: were the kubelet to expand it, the key would be on the container's
    command line, which every process on the node may read. ``_command`` expands it inside the
    process instead (``runtime.secret_flags``)."""
    return with_flag(args, "--api-key", literal(API_KEY_REF)) if ref.api_key else args


def _command(ref: DeploymentRef, command: Sequence[str]) -> list[str]:
    """A keyed container's program, started through ``runtime.secret_flags``'s own source."""
    return literal_args(container_command(command)) if ref.api_key else list(command)


def _pod_annotations(ref: DeploymentRef) -> dict[str, str]:
    """A digest of the API key on the pod template: the key reaches a container only when it
    starts, so a new key (a rotated PLINTH_ENCRYPTION_KEY) must roll the pods."""
    if not ref.api_key:
        return {}
    return {L.API_KEY_DIGEST: hashlib.sha256(ref.api_key.encode()).hexdigest()[:16]}


def _platform_pods(options: KubeOptions, component: str) -> dict[str, Any]:
    namespace = {"kubernetes.io/metadata.name": options.cluster.platform_namespace}
    return {
        "namespaceSelector": {"matchLabels": namespace},
        "podSelector": {"matchLabels": L.platform_labels(component)},
    }


def _monitoring(options: KubeOptions, port: int) -> list[dict[str, Any]]:
    if not options.cluster.monitoring_namespace:
        return []
    namespace = {"kubernetes.io/metadata.name": options.cluster.monitoring_namespace}
    return [
        {
            "from": [{"namespaceSelector": {"matchLabels": namespace}}],
            "ports": [{"port": port, "protocol": "TCP"}],
        }
    ]


def engine_network_policy(
    ref: DeploymentRef, revision: RevisionPlan, port: int, options: KubeOptions
) -> dict[str, Any]:
    """Engines take traffic from this endpoint's own pods only (its router; its other ranks and
    pools, which use NCCL, bootstrap and KV-transfer ports of their own), plus the worker's
    probe on the HTTP port. Everything else is dropped before the API key is even asked for."""
    engines = {
        "matchLabels": {L.DEPLOYMENT: ref.id},
        "matchExpressions": [{"key": L.ROLE, "operator": "NotIn", "values": ["router"]}],
    }
    own = {"podSelector": {"matchLabels": {L.DEPLOYMENT: ref.id}}}
    http = [{"port": port, "protocol": "TCP"}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, "fence-engines"), "engine"),
        "spec": {
            "podSelector": engines,
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [own]},
                {"from": [_platform_pods(options, "worker")], "ports": http},
                *_monitoring(options, port),
            ],
        },
    }


def router_network_policy(
    ref: DeploymentRef, revision: RevisionPlan, router: RolePlan, options: KubeOptions
) -> dict[str, Any]:
    """The router takes requests from the gateway and the worker only; its metrics port also
    from the monitoring namespace when there is one."""
    callers = [_platform_pods(options, "gateway"), _platform_pods(options, "worker")]
    ports = [{"port": router.port, "protocol": "TCP"}]
    if router.metrics_port:
        ports.append({"port": router.metrics_port, "protocol": "TCP"})
    rules = [{"from": callers, "ports": ports}]
    if router.metrics_port:
        rules += _monitoring(options, router.metrics_port)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, "fence-router"), "router"),
        "spec": {
            "podSelector": {"matchLabels": L.role_selector(ref.id, "router")},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }


def _container_security(*, read_only: bool, run_as_user: int | None) -> dict[str, Any]:
    security: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": read_only,
    }
    if run_as_user is not None:
        security.update(runAsNonRoot=True, runAsUser=run_as_user, runAsGroup=run_as_user)
    return security


def _probe(probe: Probe) -> dict[str, Any]:
    return {
        "httpGet": {"path": probe.path, "port": probe.port},
        "initialDelaySeconds": probe.initial_delay_s,
        "periodSeconds": probe.period_s,
        "timeoutSeconds": probe.timeout_s,
        "failureThreshold": probe.failure_threshold,
    }


def _ports(role: RolePlan) -> list[dict[str, Any]]:
    ports = [{"name": "http", "containerPort": role.port, "protocol": "TCP"}]
    if role.metrics_port and role.metrics_port != role.port:
        ports.append({"name": "metrics", "containerPort": role.metrics_port, "protocol": "TCP"})
    for name, port in sorted(role.extra_ports.items()):
        ports.append(
            {"name": name.replace("_", "-")[:15], "containerPort": port, "protocol": "TCP"}
        )
    return ports


def literal(text: str) -> str:
    """``text`` as Kubernetes passes it on: it expands ``$(VAR)`` in container args and env values,
    so a spec value such as ``$(HF_TOKEN)`` in a served name would become the Secret's value and be
    listed by ``/v1/models``. ``$$`` is Kubernetes' escape for a literal ``$``."""
    return text.replace("$", "$$")


def literal_args(args: list[str]) -> list[str]:
    return [literal(arg) for arg in args]


def _env(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, options: KubeOptions
) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": k, "value": literal(v)} for k, v in role.env.items()]
    if _engine_downloads(options.cluster):
        if revision.hf_token:
            env.append(_hf_token_env(ref))
    elif "HF_HUB_OFFLINE" not in role.env:
        # A download step filled the cache before the engine starts: it loads from there
        # without asking the hub, which it has no token for.
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    return env + _cache_env() + _api_key_env(ref)


def _engine_container(
    ref: DeploymentRef,
    revision: RevisionPlan,
    role: RolePlan,
    options: KubeOptions,
    *,
    args: list[str],
    probes: bool,
) -> dict[str, Any]:
    gpus = str(role.gpus_per_node)
    resource = options.cluster.gpu_resource
    container: dict[str, Any] = {
        "name": "engine",
        "image": engine_image(role, revision, options.cluster),
        "imagePullPolicy": "IfNotPresent",
        "command": _command(ref, role.command),
        "args": args,
        "ports": _ports(role),
        "env": _env(ref, revision, role, options),
        "resources": {
            "requests": {resource: gpus},
            "limits": {resource: gpus},
        },
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - a volume mount, not a temp file
            *_cache_mounts(),
        ],
        "lifecycle": {
            "preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep {PRESTOP_SLEEP_S}"]}}
        },
        "securityContext": _container_security(
            read_only=options.cluster.read_only_root, run_as_user=options.cluster.engine_run_as_user
        ),
    }
    if probes:
        for key, probe in (
            ("startupProbe", role.startup_probe),
            ("readinessProbe", role.readiness_probe),
            ("livenessProbe", role.liveness_probe),
        ):
            if probe is not None:
                container[key] = _probe(probe)
    return container


def engine_image(role: RolePlan, revision: RevisionPlan, cluster: ClusterSettings) -> str:
    """The spec's own image where the operator allows it; else the cluster's image for the
    SGLang version; else the public one (``role.image`` when the plan knows no version)."""
    if revision.engine_image and cluster.allows("engine_image"):
        return revision.engine_image
    if not revision.sglang_version:
        return role.image
    own = cluster.engine_images.get(revision.sglang_version)
    return own or default_engine_image(revision.sglang_version)


def router_image(revision: RevisionPlan, cluster: ClusterSettings) -> str:
    """As ``engine_image``: the spec's where allowed, else the cluster's, else smg's own."""
    if revision.router_image and cluster.allows("router_image"):
        return revision.router_image
    return cluster.router_image or ROUTER_IMAGE


def _cache_volume(ref: DeploymentRef, cluster: ClusterSettings) -> dict[str, Any]:
    chosen = cluster.model_cache
    if isinstance(chosen, ClaimCache):
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": chosen.claim_name}}
    if isinstance(chosen, SharedClaimCache):
        claim = L.object_name(ref.slug, "model-cache")
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim}}
    if isinstance(chosen, HostPathCache):
        return {
            "name": "model-cache",
            "hostPath": {"path": chosen.path, "type": "DirectoryOrCreate"},
        }
    return {"name": "model-cache", "emptyDir": {}}  # the pod's own: gone with it


def _engine_volumes(
    ref: DeploymentRef, role: RolePlan, options: KubeOptions
) -> list[dict[str, Any]]:
    shm: dict[str, Any] = {"medium": "Memory"}
    if role.shm_size_gib:
        shm["sizeLimit"] = f"{role.shm_size_gib}Gi"
    return [
        {"name": "dshm", "emptyDir": shm},
        _cache_volume(ref, options.cluster),
        {"name": "tmp", "emptyDir": {}},
    ]


def gpu_affinity(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, cluster: ClusterSettings
) -> dict[str, Any]:
    """Engine pods only on nodes of the spec's GPU type (required: an H100 endpoint never lands
    on an H200 node). The pods of one multi-node replica share that affinity, so a group is all
    one type; with a topology label they also prefer the domain (rack, NVLink clique) of the
    rest of their group (``matchLabelKeys``: the same LWS group; where that is not enabled,
    the endpoint's other pods of the role)."""
    if not revision.gpu:
        return {}
    selector = cluster.gpu_selector(revision.gpu)
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [selector.node_selector_term()]
            }
        }
    }
    if role.multi_node and cluster.topology_label:
        term = {
            "labelSelector": {"matchLabels": L.role_selector(ref.id, role.role)},
            "matchLabelKeys": [L.LWS_GROUP_KEY],
            "topologyKey": cluster.topology_label,
        }
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    return affinity


def _scheduling(cluster: ClusterSettings) -> dict[str, Any]:
    """What every pod of the cluster gets: node selector, priority class, pull secrets."""
    spec: dict[str, Any] = {}
    if cluster.node_selector:
        spec["nodeSelector"] = dict(cluster.node_selector)
    if cluster.priority_class_name:
        spec["priorityClassName"] = cluster.priority_class_name
    if cluster.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in cluster.image_pull_secrets]
    return spec


def cpu_pod_scheduling(cluster: ClusterSettings) -> dict[str, Any]:
    """A CPU pod's share of the cluster's settings (a benchmark's): what every pod gets, and
    the cluster's tolerations, none of the GPU placement."""
    spec = _scheduling(cluster)
    if cluster.tolerations:
        spec["tolerations"] = [t.manifest() for t in cluster.tolerations]
    return spec


def _pod_spec(
    ref: DeploymentRef,
    revision: RevisionPlan,
    role: RolePlan,
    options: KubeOptions,
    container: dict[str, Any],
) -> dict[str, Any]:
    cluster = options.cluster
    tolerations = [t.manifest() for t in (*cluster.gpu_tolerations, *cluster.tolerations)]
    spec: dict[str, Any] = {
        "containers": [container],
        "volumes": _engine_volumes(ref, role, options),
        "terminationGracePeriodSeconds": role.drain_seconds + PRESTOP_SLEEP_S,
        "enableServiceLinks": False,
        **_scheduling(cluster),
    }
    affinity = gpu_affinity(ref, revision, role, cluster)
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = tolerations
    if cluster.runtime_class_name:
        spec["runtimeClassName"] = cluster.runtime_class_name
    if cluster.service_account_name:
        spec["serviceAccountName"] = cluster.service_account_name
    init = _engine_init_containers(ref, revision, role, cluster)
    if init:
        spec["initContainers"] = init
    if options.cluster.engine_run_as_user is not None:
        # The cache volume and emptyDirs become writable by the engine's group.
        spec["securityContext"] = {"fsGroup": options.cluster.engine_run_as_user}
    return spec


def engine_workload(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, options: KubeOptions
) -> dict[str, Any]:
    if role.multi_node:
        return leader_worker_set(ref, revision, role, options)
    meta = _meta(ref, revision, L.object_name(ref.slug, role.role), role.role)
    args = _with_api_key(ref, literal_args(role.args))
    container = _engine_container(ref, revision, role, options, args=args, probes=True)
    # The Deployment controller's progress deadline: the startup probe's window (download,
    # load, warm-up) plus 10 minutes to schedule and pull an image of tens of GB. Past it the
    # controller reports ProgressDeadlineExceeded, which fails the revision in its words
    # (``observe.stalled_rollouts``) when Plinth's own startup window has not done so first.
    startup = role.startup_probe
    deadline = startup.period_s * startup.failure_threshold + 600 if startup else 1800
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": revision.replicas_of(role),
            "revisionHistoryLimit": 5,
            "progressDeadlineSeconds": deadline,
            "selector": {"matchLabels": L.role_selector(ref.id, role.role)},
            # Surge one new replica at a time and never remove a ready one first: the previous
            # revision keeps serving until the new one is ready.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": _template_meta(ref, _engine_pod_labels(revision, meta["labels"])),
                "spec": _pod_spec(ref, revision, role, options, container),
            },
        },
    }


def _engine_pod_labels(revision: RevisionPlan, labels: dict[str, str]) -> dict[str, str]:
    """Engine pods name their GPU type, which an unschedulable pod's reason then names."""
    return {**labels, L.GPU: revision.gpu} if revision.gpu else labels


def _template_meta(ref: DeploymentRef, labels: dict[str, str]) -> dict[str, Any]:
    annotations = _pod_annotations(ref)
    return {"labels": labels, "annotations": annotations} if annotations else {"labels": labels}


def _multi_node_args(ref: DeploymentRef, role: RolePlan) -> list[str]:
    # Escaped first: the LWS variables and the API key below are the only references Kubernetes
    # should expand.
    args = _with_api_key(ref, literal_args(role.args))
    args = with_flag(args, "--dist-init-addr", f"$(LWS_LEADER_ADDRESS):{DIST_INIT_PORT}")
    args = with_flag(args, "--nnodes", "$(LWS_GROUP_SIZE)")
    return with_flag(args, "--node-rank", "$(LWS_WORKER_INDEX)")


def _lws_template(
    ref: DeploymentRef,
    revision: RevisionPlan,
    role: RolePlan,
    options: KubeOptions,
    *,
    leader: bool,
) -> dict[str, Any]:
    container = _engine_container(
        ref, revision, role, options, args=_multi_node_args(ref, role), probes=leader
    )
    # LWS <= 0.5 does not inject the index; the Downward API label works on every version.
    index = {"fieldRef": {"fieldPath": f"metadata.labels['{L.LWS_WORKER_INDEX}']"}}
    container["env"] = [*container["env"], {"name": "LWS_WORKER_INDEX", "valueFrom": index}]
    labels = _engine_pod_labels(
        revision, L.object_labels(ref.slug, ref.id, revision.number, role.role)
    )
    return {
        "metadata": _template_meta(ref, labels),
        "spec": _pod_spec(ref, revision, role, options, container),
    }


def leader_worker_set(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, options: KubeOptions
) -> dict[str, Any]:
    """One replica = one group of ``nodes_per_replica`` pods; only the leader serves HTTP."""
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, role.role), role.role),
        "spec": {
            "replicas": revision.replicas_of(role),
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "leaderWorkerTemplate": {
                "size": role.nodes_per_replica,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _lws_template(ref, revision, role, options, leader=True),
                "workerTemplate": _lws_template(ref, revision, role, options, leader=False),
            },
        },
    }


def engine_service_name(ref: DeploymentRef, role: RolePlan) -> str:
    """A multi-node role's Service is named for the leaders it selects: the LWS controller
    names its own headless Service after the LeaderWorkerSet (the group's DNS, which
    LWS_LEADER_ADDRESS names), and one Plinth Service of that name would keep it from being made
    (or be refused as not Plinth's, had LWS made its own first)."""
    if role.multi_node:
        return L.object_name(ref.slug, f"{role.role}-leaders")
    return L.object_name(ref.slug, role.role)


def serving_selector(ref: DeploymentRef, role: RolePlan) -> dict[str, str]:
    """The pods of ``role`` that serve HTTP, for its Service and the router's discovery: all of
    them, or a multi-node role's group leaders (ranks >= 1 run no HTTP server; their pods carry
    the role's labels all the same, from the LeaderWorkerSet's worker template)."""
    selector = L.role_selector(ref.id, role.role)
    if role.multi_node:
        selector[L.LWS_WORKER_INDEX] = "0"
    return selector


def engine_service(ref: DeploymentRef, revision: RevisionPlan, role: RolePlan) -> dict[str, Any]:
    selector = serving_selector(ref, role)
    ports = [{"name": "http", "port": role.port, "targetPort": "http", "protocol": "TCP"}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ref, revision, engine_service_name(ref, role), role.role),
        "spec": {"type": "ClusterIP", "selector": selector, "ports": ports},
    }


def disruption_budget(ref: DeploymentRef, revision: RevisionPlan, role: RolePlan) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, role.role), role.role),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": L.role_selector(ref.id, role.role)},
        },
    }


def router_rbac(ref: DeploymentRef, revision: RevisionPlan) -> list[dict[str, Any]]:
    """smg's service discovery lists and watches pods in the endpoint's namespace, nothing more."""
    name = L.object_name(ref.slug, "router")
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(ref, revision, name, "router"),
        "automountServiceAccountToken": True,
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(ref, revision, name, "router"),
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(ref, revision, name, "router"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }
    return [account, role, binding]


def router_args(ref: DeploymentRef, router: RolePlan, engine_roles: list[RolePlan]) -> list[str]:
    """The plan's smg flags plus pod discovery by this endpoint's labels."""
    port = "30000"
    args = [*_with_api_key(ref, literal_args(router.args)), "--service-discovery"]
    args += ["--service-discovery-namespace", ref.namespace]
    args += ["--service-discovery-port", port]
    for role in engine_roles:
        flag = "--selector" if role.role == "engine" else f"--{role.role}-selector"
        args += [flag, *(f"{k}={v}" for k, v in serving_selector(ref, role).items())]
    return args


def _router_container(
    ref: DeploymentRef,
    revision: RevisionPlan,
    router: RolePlan,
    engine_roles: list[RolePlan],
    cluster: ClusterSettings,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "router",
        "image": router_image(revision, cluster),
        "imagePullPolicy": "IfNotPresent",
        "command": _command(ref, router.command),
        "args": router_args(ref, router, engine_roles),
        "ports": _ports(router),
        # smg sends its --api-key to every worker it discovers: one key both ways.
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, *_api_key_env(ref)],
        "resources": {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"memory": "2Gi"},
        },
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 5"]}}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],  # noqa: S108 - a volume mount
        "securityContext": {
            **_container_security(read_only=True, run_as_user=ROUTER_USER),
            "capabilities": {"drop": ["ALL"]},
        },
    }
    probes = (("readinessProbe", router.readiness_probe), ("livenessProbe", router.liveness_probe))
    for key, probe in probes:
        if probe is not None:
            container[key] = _probe(probe)
    return container


def router_deployment(
    ref: DeploymentRef,
    revision: RevisionPlan,
    router: RolePlan,
    engine_roles: list[RolePlan],
    options: KubeOptions | None = None,
) -> dict[str, Any]:
    cluster = (options or KubeOptions()).cluster
    meta = _meta(ref, revision, L.object_name(ref.slug, "router"), "router")
    pod: dict[str, Any] = {
        # Its own account (pod discovery), never the operator's engine account.
        "serviceAccountName": meta["name"],
        "containers": [_router_container(ref, revision, router, engine_roles, cluster)],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "terminationGracePeriodSeconds": router.drain_seconds + 5,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        # CPU only: the cluster's node selector and tolerations, not the GPU affinity.
        **_scheduling(cluster),
    }
    if cluster.tolerations:
        pod["tolerations"] = [t.manifest() for t in cluster.tolerations]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": router.replicas,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": L.role_selector(ref.id, "router")},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {"metadata": _template_meta(ref, meta["labels"]), "spec": pod},
        },
    }


def router_service(ref: DeploymentRef, revision: RevisionPlan, router: RolePlan) -> dict[str, Any]:
    ports = [{"name": "http", "port": router.port, "targetPort": "http", "protocol": "TCP"}]
    if router.metrics_port:
        ports.append(
            {
                "name": "metrics",
                "port": router.metrics_port,
                "targetPort": "metrics",
                "protocol": "TCP",
            }
        )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, "router"), "router"),
        "spec": {
            "type": "ClusterIP",
            "selector": L.role_selector(ref.id, "router"),
            "ports": ports,
        },
    }


def router_url(ref: DeploymentRef, port: int) -> str:
    """What the gateway forwards to: the router Service's cluster DNS name."""
    return f"http://{L.object_name(ref.slug, 'router')}.{ref.namespace}.svc:{port}"
