"""Pure renderers: a revision's LaunchPlan -> the plain-dict manifests of one endpoint.

No client, no I/O: every function here is a function of its arguments, so manifests are tested
against the Kubernetes schemas without a cluster. Per engine role: a Deployment (a LeaderWorkerSet
when one replica spans nodes) with a rolling update that surges one replica and never takes a
ready one away, a Service and a PodDisruptionBudget. For the router: smg discovering engine pods by
label, with the ServiceAccount, Role and RoleBinding that lets it list pods, and its Service. A
Secret carries the model hub token when the model is gated.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from deployments.drivers.base import DeploymentRef, RevisionPlan
from deployments.drivers.kube import labels as L
from runtime.launch import DIST_INIT_PORT, Probe, RolePlan, with_flag
from runtime.spec import MODEL_CACHE_PATH

HF_TOKEN_KEY = "HF_TOKEN"
PRESTOP_SLEEP_S = 15  # lets the router see the pod go unready before the engine drains
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"


@dataclass(frozen=True)
class KubeOptions:
    """Per-cluster choices an operator makes once."""

    # Node labels per GPU type; every GPU pod also needs nodes with the NVIDIA device plugin.
    gpu_node_selector: dict[str, str] = field(
        default_factory=lambda: {"nvidia.com/gpu.present": "true"}
    )
    gpu_resource: str = "nvidia.com/gpu"
    # A ReadWriteMany claim for the model cache; without one each node caches on its own disk.
    model_cache_claim: str | None = None
    model_cache_host_path: str = "/var/lib/plinth/model-cache"
    image_pull_secret: str | None = None


def render_revision(
    ref: DeploymentRef, revision: RevisionPlan, options: KubeOptions | None = None
) -> list[dict[str, Any]]:
    """Every object of ``ref`` at ``revision``, in apply order (dependencies first)."""
    options = options or KubeOptions()
    objects: list[dict[str, Any]] = []
    if revision.hf_token:
        objects.append(hf_token_secret(ref, revision))
    engines = [r for r in revision.plan.roles if r.role != "router"]
    for role in engines:
        objects.append(engine_workload(ref, revision, role, options))
        objects.append(engine_service(ref, revision, role))
        objects.append(disruption_budget(ref, revision, role))
    router = revision.plan.role("router")
    if router is not None:
        objects += router_rbac(ref, revision)
        objects.append(router_deployment(ref, revision, router, [r.role for r in engines]))
        objects.append(router_service(ref, revision, router))
    return [with_config_hash(o) for o in objects]


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


def _env(ref: DeploymentRef, revision: RevisionPlan, role: RolePlan) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": k, "value": literal(v)} for k, v in role.env.items()]
    if role.role != "router":
        env.append({"name": "HF_HOME", "value": MODEL_CACHE_PATH})
    if revision.hf_token and role.role != "router":
        secret = L.object_name(ref.slug, "hf-token")
        ref_ = {"secretKeyRef": {"name": secret, "key": HF_TOKEN_KEY}}
        env.append({"name": HF_TOKEN_KEY, "valueFrom": ref_})
    return env


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
    container: dict[str, Any] = {
        "name": "engine",
        "image": role.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(role.command),
        "args": args,
        "ports": _ports(role),
        "env": _env(ref, revision, role),
        "resources": {
            "requests": {options.gpu_resource: gpus},
            "limits": {options.gpu_resource: gpus},
        },
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - a volume mount, not a temp file
            {"name": "model-cache", "mountPath": MODEL_CACHE_PATH},
        ],
        "lifecycle": {
            "preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep {PRESTOP_SLEEP_S}"]}}
        },
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


def _engine_volumes(role: RolePlan, options: KubeOptions) -> list[dict[str, Any]]:
    shm: dict[str, Any] = {"medium": "Memory"}
    if role.shm_size_gib:
        shm["sizeLimit"] = f"{role.shm_size_gib}Gi"
    cache: dict[str, Any]
    if options.model_cache_claim:
        cache = {"persistentVolumeClaim": {"claimName": options.model_cache_claim}}
    else:
        cache = {"hostPath": {"path": options.model_cache_host_path, "type": "DirectoryOrCreate"}}
    return [{"name": "dshm", "emptyDir": shm}, {"name": "model-cache", **cache}]


def _pod_spec(role: RolePlan, options: KubeOptions, container: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [container],
        "volumes": _engine_volumes(role, options),
        "nodeSelector": dict(options.gpu_node_selector),
        "tolerations": [
            {"key": options.gpu_resource, "operator": "Exists", "effect": "NoSchedule"}
        ],
        "terminationGracePeriodSeconds": role.drain_seconds + PRESTOP_SLEEP_S,
        "enableServiceLinks": False,
    }
    if options.image_pull_secret:
        spec["imagePullSecrets"] = [{"name": options.image_pull_secret}]
    return spec


def engine_workload(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, options: KubeOptions
) -> dict[str, Any]:
    if role.multi_node:
        return leader_worker_set(ref, revision, role, options)
    meta = _meta(ref, revision, L.object_name(ref.slug, role.role), role.role)
    args = literal_args(role.args)
    container = _engine_container(ref, revision, role, options, args=args, probes=True)
    startup = role.startup_probe
    deadline = startup.period_s * startup.failure_threshold + 600 if startup else 1800
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": revision.replicas,
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
                "metadata": {"labels": meta["labels"]},
                "spec": _pod_spec(role, options, container),
            },
        },
    }


def _multi_node_args(role: RolePlan) -> list[str]:
    # Escaped first: the LWS variables below are the only references Kubernetes should expand.
    args = literal_args(role.args)
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
        ref, revision, role, options, args=_multi_node_args(role), probes=leader
    )
    # LWS <= 0.5 does not inject the index; the Downward API label works on every version.
    index = {"fieldRef": {"fieldPath": f"metadata.labels['{L.LWS_WORKER_INDEX}']"}}
    container["env"] = [*container["env"], {"name": "LWS_WORKER_INDEX", "valueFrom": index}]
    labels = L.object_labels(ref.slug, ref.id, revision.number, role.role)
    return {"metadata": {"labels": labels}, "spec": _pod_spec(role, options, container)}


def leader_worker_set(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, options: KubeOptions
) -> dict[str, Any]:
    """One replica = one group of ``nodes_per_replica`` pods; only the leader serves HTTP."""
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, role.role), role.role),
        "spec": {
            "replicas": revision.replicas,
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


def engine_service(ref: DeploymentRef, revision: RevisionPlan, role: RolePlan) -> dict[str, Any]:
    selector = L.role_selector(ref.id, role.role)
    if role.multi_node:
        selector[L.LWS_WORKER_INDEX] = "0"  # ranks >= 1 serve no HTTP
    ports = [{"name": "http", "port": role.port, "targetPort": "http", "protocol": "TCP"}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(ref, revision, L.object_name(ref.slug, role.role), role.role),
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


def router_args(ref: DeploymentRef, router: RolePlan, engine_roles: list[str]) -> list[str]:
    """The plan's smg flags plus pod discovery by this endpoint's labels."""
    port = "30000"
    args = [*literal_args(router.args), "--service-discovery"]
    args += ["--service-discovery-namespace", ref.namespace]
    args += ["--service-discovery-port", port]
    for role in engine_roles:
        flag = "--selector" if role == "engine" else f"--{role}-selector"
        args += [flag, f"{L.DEPLOYMENT}={ref.id}", f"{L.ROLE}={role}"]
    return args


def _router_container(
    ref: DeploymentRef, router: RolePlan, engine_roles: list[str]
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "router",
        "image": router.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(router.command),
        "args": router_args(ref, router, engine_roles),
        "ports": _ports(router),
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
        "resources": {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"memory": "2Gi"},
        },
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 5"]}}},
    }
    probes = (("readinessProbe", router.readiness_probe), ("livenessProbe", router.liveness_probe))
    for key, probe in probes:
        if probe is not None:
            container[key] = _probe(probe)
    return container


def router_deployment(
    ref: DeploymentRef, revision: RevisionPlan, router: RolePlan, engine_roles: list[str]
) -> dict[str, Any]:
    meta = _meta(ref, revision, L.object_name(ref.slug, "router"), "router")
    pod = {
        "serviceAccountName": meta["name"],
        "containers": [_router_container(ref, router, engine_roles)],
        "terminationGracePeriodSeconds": router.drain_seconds + 5,
        "enableServiceLinks": False,
    }
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
            "template": {"metadata": {"labels": meta["labels"]}, "spec": pod},
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
