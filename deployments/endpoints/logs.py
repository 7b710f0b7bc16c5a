"""Logs of an endpoint's replicas, read by its cluster's driver: one implementation for the API,
the console page, its follow mode and its download.

Front ends never import a driver (import-linter), so they call :func:`read_logs`, which checks
the request, picks the endpoint's driver as reconcile does and asks it: files of the local
cluster's processes, pods' containers on a Kubernetes cluster. A replica name is matched against
the names the driver lists, never joined into a path, so no input reaches another endpoint's
logs. Every line comes from the driver as plain text (no terminal escapes) with its API keys
masked (``drivers.base.clean_log_line``). Who may read logs is the caller's
business (developers and up: a log can hold what users sent).

Each line gets a level read from its text (SGLang's and uvicorn's ``INFO``/``WARNING``/``ERROR``
words, smg's ``WARN``, a ``Traceback``); a line that names none and does not start with a time
(a traceback's frames, a wrapped message) takes the level of the line before it. The search
(``q``) and the level filter apply here, on the server, to the lines read: the last ``tail`` of
them, or those after a follower's cursor, which moves on past filtered-out lines so a follower
never sees one twice.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from controlplane.services import ServiceError
from deployments.clusters.drivers import driver_for, ref_for
from deployments.clusters.models import ClusterKind
from deployments.drivers.base import MAX_LOG_LINES, LogLine, LogQuery, LogSource
from deployments.drivers.errors import DriverError, TemporaryDriverError
from deployments.endpoints.models import Deployment
from deployments.fleet import placing

logger = logging.getLogger(__name__)

MAX_LINES = MAX_LOG_LINES
ROLES = ("engine", "prefill", "decode", "router")
# How far back ``since`` may reach in seconds (a week: beyond any kubelet's log rotation).
MAX_SINCE_SECONDS = 7 * 24 * 3600
CURSOR = re.compile(r"\A[0-9A-Za-z:.\-]{1,64}\Z")
# Levels a reader can filter by, least severe first; a filter keeps its level and those after.
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
MAX_SEARCH = 200
# The level word is looked for near the start (after a timestamp, a logger name), so a message
# that merely mentions "error" later on is not an ERROR line.
_LEVEL_WORD = re.compile(
    r"\b(DEBUG|INFO|WARN(?:ING)?|ERROR|CRITICAL|FATAL|Traceback)\b", re.IGNORECASE
)
_LEVEL_NAMES = {
    "debug": "DEBUG",
    "info": "INFO",
    "warn": "WARNING",
    "warning": "WARNING",
    "error": "ERROR",
    "critical": "ERROR",
    "fatal": "ERROR",
    "traceback": "ERROR",
}
# A line that starts with a time ("[2026-01-01 12:00:00]", "2026-01-01T12:00:00Z") begins a new
# record; any other line (a traceback's frames, a wrapped message) continues the one before.
_NEW_RECORD = re.compile(r"\A\s*\[?\d{4}-\d{2}-\d{2}")
_LEVEL_SCAN_CHARS = 80

__all__ = [
    "LEVELS",
    "MAX_LINES",
    "LogEntry",
    "LogLine",
    "LogSource",
    "Logs",
    "LogsUnavailable",
    "line_level",
    "parse_since",
]


class LogsUnavailable(Exception):
    """The cluster could not be asked (unreachable, refused the kubeconfig). ``message`` is the
    driver's, written to be shown; ``temporary``: asking again later may work."""

    def __init__(self, message: str, *, temporary: bool) -> None:
        super().__init__(message)
        self.message = message
        self.temporary = temporary


@dataclass(frozen=True)
class LogEntry:
    """A line as shown: its text, when it was written (None: the log does not say), its level
    ("" when neither it nor the record it continues names one; counted as INFO)."""

    text: str
    ts: datetime | None = None
    level: str = ""


@dataclass(frozen=True)
class Logs:
    """What was read: see ``deployments.drivers.base.LogLines``. ``lines`` are those that pass
    the search and level filter; ``read`` counts the lines read before filtering."""

    replica: str
    role: str = ""
    lines: list[LogEntry] = field(default_factory=list)
    replicas: tuple[LogSource, ...] = ()
    cursor: str = ""
    continued: bool = False
    more: bool = False
    previous: bool = False
    read: int = 0

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


def line_level(text: str) -> str:
    """The level a log line names near its start ("" when none): INFO, WARNING, ERROR, DEBUG."""
    found = _LEVEL_WORD.search(text[:_LEVEL_SCAN_CHARS])
    if found is None:
        return ""
    word = found.group(1)
    # "Traceback" is only a level in its own capitalisation (it starts Python's tracebacks);
    # the level words are upper case in every log format seen (SGLang, uvicorn, smg).
    if word != "Traceback" and not word.isupper():
        return ""
    return _LEVEL_NAMES[word.lower()]


def filter_lines(lines: list[LogLine], *, q: str = "", level: str = "") -> list[LogEntry]:
    """``lines`` with their levels, keeping those that contain ``q`` (any case) and are at
    ``level`` or more severe. A line naming no level continues the record before it (and takes
    its level) unless it starts with a time, which begins a new record with no level word; no
    level counts as INFO (SGLang writes its ordinary lines with none)."""
    needle = q.casefold()
    floor = LEVELS.index(level) if level else 0
    kept: list[LogEntry] = []
    current = ""
    for line in lines:
        named = line_level(line.text)
        if named or _NEW_RECORD.match(line.text):
            current = named
        if LEVELS.index(current or "INFO") < floor:
            continue
        if needle and needle not in line.text.casefold():
            continue
        kept.append(LogEntry(text=line.text, ts=line.ts, level=current))
    return kept


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
    q: str | None = None,
    level: str | None = None,
) -> Logs:
    """Lines of one replica's log (see ``LogQuery``); the first replica's (of ``role``) when
    none is named, or, with ``fallback``, when the named one is gone. ``q`` keeps the lines
    that contain it (any case), ``level`` those at that level or above (see ``LEVELS``).

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
    if level and level not in LEVELS:
        raise ServiceError(f"level: one of {', '.join(LEVELS)}", field="level")
    if q and len(q) > MAX_SEARCH:
        raise ServiceError(f"q: at most {MAX_SEARCH} characters", field="q")
    cluster = placing.cluster_of_replica(deployment, replica)  # on several, the replica's
    if previous and cluster.kind == ClusterKind.LOCAL:
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
        driver = driver_for(cluster)
    except DriverError as exc:
        raise LogsUnavailable(exc.message, temporary=False) from None
    try:
        found = driver.logs(ref_for(deployment, cluster), query)
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
        lines=filter_lines(found.lines, q=q or "", level=level or ""),
        replicas=found.replicas,
        cursor=found.cursor,
        continued=found.continued,
        more=found.more,
        previous=previous,
        read=len(found.lines),
    )
