"""Celery's discovery module for the deployments app: each package keeps its own tasks,
and each task reloads what it names (or what is due) and calls one function."""

from __future__ import annotations

from deployments.autoscaling.tasks import *  # noqa: F403
from deployments.clusters.tasks import *  # noqa: F403
from deployments.endpoints.tasks import *  # noqa: F403
from deployments.experiments.tasks import *  # noqa: F403
from deployments.fleet.tasks import *  # noqa: F403
from deployments.quantization.tasks import *  # noqa: F403
from deployments.traffic.tasks import *  # noqa: F403
