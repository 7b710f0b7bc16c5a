"""Celery tasks of the deployments domain. Thin: each takes ids, reloads, calls one function.

Split by concern so each module stays small; Celery discovers them through this package.
"""

from __future__ import annotations

from deployments.tasks.benchmarks import *  # noqa: F403
from deployments.tasks.canary import *  # noqa: F403
from deployments.tasks.clusters import *  # noqa: F403
from deployments.tasks.engine import *  # noqa: F403
from deployments.tasks.quality import *  # noqa: F403
from deployments.tasks.scaling import *  # noqa: F403
from deployments.tasks.traffic import *  # noqa: F403
