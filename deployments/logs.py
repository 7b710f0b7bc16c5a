"""Logs of an endpoint's replicas, read by its cluster's driver: one implementation for the API,
the console page, its follow mode and its download.

Front ends never import a driver (import-linter), so they call :func:`read_logs`, which checks
the request, picks the endpoint's driver as reconcile does and asks it: files of the local
cluster's processes, pods' containers on a Kubernetes cluster. A replica name is matched against
the names the driver lists, never joined into a path, so no input reaches another endpoint's
logs. Every line is redacted of API keys by the driver. Who may read logs is the caller's
business (developers and up: a log can hold what users sent).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from controlplane.services import ServiceError
from deployments.drivers.base import MAX_LOG_LINES, LogLine, LogQuery, LogSource
from deployments.drivers.errors import DriverError, TemporaryDriverError
from deployments.drivers.registry import driver_for, ref_for
from deployments.models import ClusterKind, Deployment

logger = logging.getLogger(__name__)

MAX_LINES = MAX_LOG_LINES
ROLES = ("engine", "prefill", "decode", "router")
# How far back ``since`` may reach in seconds (a week: beyond any kubelet's log rotation).
MAX_SINCE_SECONDS = 7 * 24 * 3600
CURSOR = re.compile(r"\A[0-9A-Za-z:.\-]{1,64}\Z")

__all__ = ["MAX_LINES", "LogLine", "LogSource", "Logs", "LogsUnavailable", "parse_since"]


class LogsUnavailable(Exception):
    """The cluster could not be asked (unreachable, refused the kubeconfig). ``message`` is the
    driver's, written to be shown; ``temporary``: asking again later may work."""

    def __init__(self, message: str, *, temporary: bool) -> None:
        super().__init__(message)
        self.message = message
        self.temporary = temporary


@dataclass(frozen=True)
class Logs:
    """What was read: see ``deployments.drivers.base.LogLines``."""

    replica: str
    role: str = ""
    lines: list[LogLine] = field(default_factory=list)
    replicas: tuple[LogSource, ...] = ()
    cursor: str = ""
    continued: bool = False
    more: bool = False
    previous: bool = False

    @property
    def has_previous(self) -> bool:
        """Whether the replica shown has a previous run's log to read (Kubernetes)."""
        return any(s.has_previous for s in self.replicas if s.name == self.replica)


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """``since`` as an RFC 3339 time (a zone is required) or a number of seconds before now."""
    text = value.strip()
    if text.isdigit():
        seconds = int(text)
        if not 1 <= seconds <= MAX_SINCE_SECONDS:
            raise ServiceError(
                f"since: seconds must be between 1 and {MAX_SINCE_SECONDS} (a week)",
                field="since",
            )
        return (now or timezone.now()) - timedelta(seconds=seconds)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ServiceError(
            "since: give an RFC 3339 time with its zone (2025-06-01T12:00:00Z) or a number of "
            "seconds before now (300)",
            field="since",
        )
    return parsed


def read_logs(
    deployment: Deployment,
    *,
    replica: str | None = None,
    role: str | None = None,
    tail: int = 200,
    since: datetime | None = None,
    previous: bool = False,
    after: str | None = None,
    fallback: bool = False,
) -> Logs:
    """Lines of one replica's log (see ``LogQuery``); the first replica's (of ``role``) when
    none is named, or, with ``fallback``, when the named one is gone.

    Raises ServiceError naming the field for a request that cannot be answered (an unknown
    replica or role, ``previous`` where there is no previous run) and LogsUnavailable when the
    cluster cannot be asked.
    """
    if not 1 <= tail <= MAX_LINES:
        raise ServiceError(f"tail: between 1 and {MAX_LINES} lines", field="tail")
    if role is not None and role not in ROLES:
        raise ServiceError(f"role: one of {', '.join(ROLES)}", field="role")
    if after is not None and not CURSOR.match(after):
        raise ServiceError("after: pass back the cursor of an earlier answer", field="after")
    if previous and deployment.cluster.kind == ClusterKind.LOCAL:
        raise ServiceError(
            "previous: the local cluster keeps every run of a process in one log (each run "
            "begins with a '--- starting' line); read it without previous",
            field="previous",
        )
    query = LogQuery(
        replica=replica or None,
        role=role,
        tail=tail,
        since=since,
        previous=previous,
        after=after or None,
        fallback=fallback,
    )
    try:
        driver = driver_for(deployment.cluster)
    except DriverError as exc:
        raise LogsUnavailable(exc.message, temporary=False) from None
    try:
        found = driver.logs(ref_for(deployment), query)
    except DriverError as exc:
        logger.info("logs of %s unavailable: %s", deployment.slug, exc.message)
        temporary = isinstance(exc, TemporaryDriverError)
        raise LogsUnavailable(exc.message, temporary=temporary) from None
    finally:
        driver.close()
    source = found.source
    if query.replica is not None and source is None:
        of_role = f" of role {role}" if role else ""
        names = ", ".join(s.name for s in found.replicas if role is None or s.role == role)
        raise ServiceError(
            f"replica: {deployment.slug} has no replica {query.replica!r}{of_role}"
            + (f"; it has {names}" if names else ""),
            field="replica",
            code="not_found",
        )
    if previous and source is not None and not source.has_previous:
        raise ServiceError(
            f"previous: {source.name} has not restarted, so there is no previous run to read",
            field="previous",
        )
    return Logs(
        replica=found.replica,
        role=source.role if source else "",
        lines=found.lines,
        replicas=found.replicas,
        cursor=found.cursor,
        continued=found.continued,
        more=found.more,
        previous=previous,
    )
