"""The Kubernetes renderers, as a package; split by object family in the next step."""

from deployments.drivers.kube.render.engines import (
    HF_TOKEN_KEY,
    LWS_API_VERSION,
    PRESTOP_SLEEP_S,
    ROUTER_USER,
    KubeOptions,
    cpu_pod_scheduling,
    render_revision,
    router_url,
    with_operator_metadata,
)
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
