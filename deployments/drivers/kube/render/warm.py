"""A warm pool on Kubernetes (``autoscaling.warm_replicas``): what an engine pod carries so the
worker can release and resume it through the API server alone.

The engine role's Deployment runs the wanted replicas plus the warm ones it keeps (the driver
counts them); which pods are warm is the worker's annotation ``plinth.dev/warm`` on each pod
(``driver`` writes it, with ``controller.kubernetes.io/pod-deletion-cost``). Each engine pod
runs the in-pod agent (``runtime/warm_agent.py``, shipped in a ConfigMap and run by the engine
image's Python) beside the engine: it reads the annotation from a downward API file and calls
the engine on localhost, and its readiness keeps a warm pod out of the router's discovery and
the Services. The engine's liveness probe asks the agent (``/live``): SGLang's ``/health`` runs
a generation, which a released engine cannot.

Only single-node replicas (a Deployment): a multi-node replica's ranks would all have to release
together, through its leader, which this does not do; such roles are rendered without it.
"""

from __future__ import annotations

import inspect
from typing import Any

from deployments.drivers.base import DeploymentRef, RevisionPlan
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render.metadata import api_key_env, object_meta
from deployments.drivers.kube.render.options import KubeOptions
from deployments.drivers.kube.render.pods import container_security
from runtime import warm_agent
from runtime.launch import RolePlan

AGENT_PORT = 30010
AGENT_SCRIPT = "warm_agent.py"
_SCRIPT_DIR = "/opt/plinth-warm"
_FLAG_DIR = "/etc/plinth-warm"
_STATE_DIR = "/var/run/plinth-warm"


def has_warm_pool(revision: RevisionPlan, role: RolePlan) -> bool:
    return revision.warm_replicas > 0 and role.role == "engine" and not role.multi_node


def agent_config_map_name(ref: DeploymentRef) -> str:
    return L.object_name(ref.slug, "warm-agent")


def agent_config_map(ref: DeploymentRef, revision: RevisionPlan) -> dict[str, Any]:
    """The agent's source, which the pods run: a change to it rolls them (the config hash)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_meta(ref, revision, agent_config_map_name(ref), "engine"),
        "data": {AGENT_SCRIPT: inspect.getsource(warm_agent)},
    }


def agent_container(
    ref: DeploymentRef, role: RolePlan, image: str, options: KubeOptions
) -> dict[str, Any]:
    args = [
        f"{_SCRIPT_DIR}/{AGENT_SCRIPT}",
        f"--engine=http://127.0.0.1:{role.port}",
        f"--flag={_FLAG_DIR}/warm",
        f"--state={_STATE_DIR}/released",
        f"--port={AGENT_PORT}",
    ]
    return {
        "name": "warm-agent",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python3"],
        "args": args,
        "ports": [{"name": "warm-agent", "containerPort": AGENT_PORT, "protocol": "TCP"}],
        "env": api_key_env(ref),
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": AGENT_PORT},
            "periodSeconds": warm_agent.READY_PROBE_PERIOD_S,
            "timeoutSeconds": 5,
            "failureThreshold": 1,
        },
        "volumeMounts": [
            {"name": "warm-agent", "mountPath": _SCRIPT_DIR, "readOnly": True},
            {"name": "warm-flag", "mountPath": _FLAG_DIR, "readOnly": True},
            {"name": "warm-state", "mountPath": _STATE_DIR},
        ],
        "securityContext": container_security(
            read_only=options.cluster.read_only_root, run_as_user=options.cluster.engine_run_as_user
        ),
    }


def agent_volumes(ref: DeploymentRef) -> list[dict[str, Any]]:
    annotation = {"fieldRef": {"fieldPath": f"metadata.annotations['{L.WARM}']"}}
    return [
        {"name": "warm-agent", "configMap": {"name": agent_config_map_name(ref)}},
        {"name": "warm-flag", "downwardAPI": {"items": [{"path": "warm", **annotation}]}},
        {"name": "warm-state", "emptyDir": {}},
    ]


def live_through_agent(probe: dict[str, Any]) -> dict[str, Any]:
    """The engine's liveness probe, asked of the agent (see the module docstring)."""
    return {**probe, "httpGet": {"path": "/live", "port": AGENT_PORT}}
