"""Log tails of an endpoint's replicas, read by its cluster's driver: one implementation.

Views never import a driver (import-linter), so they call :func:`read_logs`, which picks the
endpoint's driver as reconcile does and asks it: files of the local cluster's processes, pods of
a Kubernetes cluster. The caller's replica name is matched against the names the driver has,
never joined into a path, so no input can reach another endpoint's logs.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from deployments.drivers.errors import DriverError
from deployments.drivers.registry import driver_for, ref_for
from deployments.models import Deployment

MAX_LINES = 500
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Logs:
    """What the logs page shows; ``unavailable`` says why nothing could be read (a driver's
    message, written to be shown)."""

    replica: str = ""
    lines: list[str] = field(default_factory=list)
    replicas: tuple[str, ...] = ()
    unavailable: str = ""


def read_logs(deployment: Deployment, replica: str | None, lines: int = 200) -> Logs:
    """The last ``lines`` lines of ``replica`` (the first replica when none or unknown asked)."""
    lines = max(1, min(lines, MAX_LINES))
    try:
        driver = driver_for(deployment.cluster)
    except DriverError as exc:
        return Logs(unavailable=exc.message)
    try:
        found = driver.logs(ref_for(deployment), replica, tail=lines)
    except DriverError as exc:
        logger.info("logs of %s unavailable: %s", deployment.slug, exc.message)
        return Logs(unavailable=exc.message)
    finally:
        driver.close()
    return Logs(replica=found.replica, lines=found.lines, replicas=found.replicas)
