"""What the console shows of an endpoint's experiments: the Canary card on the endpoint page and
the Experiments tab (benchmarks, canaries and quality gates, newest first). Reads only."""

from __future__ import annotations

import json
from typing import Any

from deployments.endpoints.models import Deployment
from deployments.experiments.canary import watch as canary_watch
from deployments.experiments.canary.rules import MAX_WEIGHT, MIN_WEIGHT
from deployments.experiments.models import CanaryStatus
from deployments.experiments.queries import benchmarks_of, canaries_of, gates_of, running_canary
from runtime.quality import DEFAULT_MAX_MEAN_KL, DEFAULT_MIN_TOP1_AGREEMENT


def canary_context(endpoint: Deployment) -> dict[str, Any]:
    """What the Canary card shows: the running canary (with each side's window figures), else
    the last one, and the serving settings to start a new one from."""
    running = running_canary(endpoint)
    serving = endpoint.current_revision
    return {
        "canary": running or canaries_of(endpoint).first(),
        "canary_traffic": canary_watch.traffic(running) if running is not None else {},
        "canary_spec": json.dumps(serving.spec, indent=2) if serving is not None else "",
        "canary_weights": (MIN_WEIGHT, MAX_WEIGHT),
    }


ROWS = 20  # of each kind


def experiments_context(endpoint: Deployment) -> dict[str, Any]:
    canaries = list(canaries_of(endpoint)[:ROWS])
    return {
        "endpoint": endpoint,
        "tab": "experiments",
        "benchmarks": list(benchmarks_of(endpoint)[:ROWS]),
        "canaries": canaries,
        "running": next((c for c in canaries if c.status == CanaryStatus.RUNNING), None),
        "gates": list(gates_of(endpoint)[:ROWS]),
        "gate_defaults": {
            "max_mean_kl": DEFAULT_MAX_MEAN_KL,
            "min_top1": DEFAULT_MIN_TOP1_AGREEMENT,
        },
    }
