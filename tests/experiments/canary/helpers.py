"""What the canary tests share: a BF16 spec and its FP8-weights variant, and a stand-in for what
reconcile records once an endpoint serves (for tests that need no engine)."""

from __future__ import annotations

from typing import Any

from deployments.endpoints.models import Deployment

BF16: dict[str, Any] = {
    "model": {
        "source": "meta-llama/Llama-3.1-8B-Instruct",
        "served_name": "chat",
        "dtype": "bfloat16",
    },
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 1, "max_replicas": 4},
}


def fp8(spec: dict[str, Any] = BF16, **runtime_env: str) -> dict[str, Any]:
    """``spec`` with FP8 weights (and simulator settings in ``runtime.env``, if given)."""
    out = {**spec, "quantization": {"method": "fp8"}}
    if runtime_env:
        out["runtime"] = {
            **spec.get("runtime", {}),
            "env": {**spec.get("runtime", {}).get("env", {}), **runtime_env},
        }
    return out


def mark_serving(deployment: Deployment) -> Deployment:
    """What reconcile records once the target revision serves: it is current and applied."""
    Deployment.objects.filter(pk=deployment.pk).update(
        current_revision_id=deployment.target_revision_id,
        applied_revision_id=deployment.target_revision_id,
        ready_replicas=1,
        total_replicas=1,
    )
    return Deployment.objects.get(pk=deployment.pk)
