"""Console pages of an endpoint's history and telemetry: revisions (diff, rollback), metrics
charts, the events timeline and per-replica logs (by role and replica; follow, timestamps,
search, level filter, download)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from controlplane.access import require_role
from controlplane.error_pages import error_answer
from controlplane.guard import HtmxHttpRequest, actor_of, console_view
from controlplane.models import Role
from controlplane.services import ServiceError
from deployments.endpoints import logs, queries, services
from deployments.endpoints.charts import Chart, Series
from deployments.endpoints.diff import diff_revisions
from deployments.status import NOT_SERVING
from deployments.traffic.models import MetricSample


@require_GET
@console_view
def revision_list(request: HttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    revisions = queries.revisions_of(endpoint)
    # Each revision's changes against the one before it, computed in memory (no extra queries).
    changes = {
        newer.number: diff_revisions(older.spec, newer.spec)
        for newer, older in itertools.pairwise(revisions)
    }
    rows = [(r, changes.get(r.number, [])) for r in revisions]
    context = {"endpoint": endpoint, "rows": rows, "tab": "revisions"}
    return render(request, "deployments/revisions.html", context)


@require_GET
@console_view
def revision_diff(request: HttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    a = queries.get_revision(endpoint, _number(request.GET.get("a")))
    b = queries.get_revision(endpoint, _number(request.GET.get("b")))
    context = {"endpoint": endpoint, "a": a, "b": b, "changes": diff_revisions(a.spec, b.spec)}
    return render(request, "deployments/revision_diff.html", {**context, "tab": "revisions"})


def _number(raw: str | None) -> int:
    try:
        return int(raw or "")
    except ValueError:
        return 0


@require_POST
@console_view
def revision_rollback(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    actor = actor_of(request)
    endpoint = queries.get_endpoint(actor, slug)
    target = queries.get_revision(endpoint, number)
    try:
        services.rollback(
            actor,
            endpoint.pk,
            to_revision=target.number,
            message=request.POST.get("message", "").strip(),
        )
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Rolling back to revision {target.number}.")
    return redirect("endpoint-revisions", slug=endpoint.slug)


def metric_charts(samples: list[MetricSample], minutes: int) -> list[Chart]:
    """The endpoint's charts over the last ``minutes``: the x axis is that window, not the
    samples' own span, so a few samples sit where they happened rather than filling the width."""
    times = [s.ts for s in samples]
    end = timezone.now()
    start = end - timedelta(minutes=minutes)

    def series(label: str, attr: str, scale: float = 1.0) -> Series:
        values = [getattr(s, attr) for s in samples]
        return Series(label, [None if v is None else v * scale for v in values])

    def chart(title: str, unit: str, *lines: Series) -> Chart:
        return Chart(title, unit, times, lines, start=start, end=end)

    by_replica, by_revision = _breakdowns(samples)
    return [
        chart("Requests", "req/s", series("all", "requests_per_s"), *by_revision("requests_per_s")),
        chart("Tokens", "tok/s", series("all", "tokens_per_s"), *by_replica("tokens_per_s", 1.0)),
        chart("TTFT", "ms", series("p50", "ttft_p50", 1000), series("p90", "ttft_p90", 1000)),
        chart("ITL", "ms", series("p50", "itl_p50", 1000), series("p90", "itl_p90", 1000)),
        chart(
            "Requests in engine", "count", series("running", "running"), series("queued", "queued")
        ),
        chart("KV cache usage", "%", series("mean", "kv_usage", 100), *by_replica("kv_usage", 100)),
        chart(
            "Prefix cache hit rate",
            "%",
            series("hit rate", "cache_hit_rate", 100),
            *_tier_series(samples),
        ),
        chart("Speculator accept length", "tokens", series("accept", "spec_accept_length")),
        chart("Replicas ready", "count", series("ready", "replicas_ready")),
    ]


# HiCache's tiers as the console names them (SGLang's ``cache_source`` values).
TIER_LABELS = {"device": "GPU", "host": "host memory", "storage": "storage"}


def _tier_series(samples: list[MetricSample]) -> list[Series]:
    """One hit-rate line per KV tier, when the window holds samples of an engine with HiCache's
    tiers; a sample without them is a gap."""
    if not any(s.cache_tiers for s in samples):
        return []
    return [
        Series(
            label,
            [None if not s.cache_tiers else s.cache_tiers.get(tier, 0.0) * 100 for s in samples],
        )
        for tier, label in TIER_LABELS.items()
    ]


def _breakdowns(
    samples: list[MetricSample],
) -> tuple[Callable[[str, float], list[Series]], Callable[[str], list[Series]]]:
    """Series builders from the samples' per-replica figures: one line per replica, and one per
    revision (its replicas summed), each only when the window holds more than one, since a lone
    replica's or revision's line is the total's. A sample where a replica or revision did not
    run is a gap in its line, not a zero."""
    names = list(dict.fromkeys(r["name"] for s in samples for r in s.replicas or []))
    revisions = sorted(
        {r["revision"] for s in samples for r in s.replicas or [] if r.get("revision") is not None}
    )

    def by_replica(attr: str, scale: float = 1.0) -> list[Series]:
        if len(names) < 2:
            return []
        lines = []
        for name in names:
            values: list[float | None] = []
            for sample in samples:
                mine = next((r for r in sample.replicas or [] if r["name"] == name), None)
                value = None if mine is None else mine.get(attr)
                values.append(None if value is None else value * scale)
            lines.append(Series(name, values))
        return lines

    def by_revision(attr: str) -> list[Series]:
        if len(revisions) < 2:
            return []
        lines = []
        for number in revisions:
            values: list[float | None] = []
            for sample in samples:
                mine = [
                    r.get(attr) or 0.0 for r in sample.replicas or [] if r.get("revision") == number
                ]
                values.append(sum(mine) if mine else None)
            lines.append(Series(f"revision {number}", values))
        return lines

    return by_replica, by_revision


@require_GET
@console_view
def endpoint_metrics(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    minutes = {"15": 15, "60": 60, "360": 360}.get(request.GET.get("window", "60"), 60)
    samples = queries.recent_samples(endpoint, minutes=minutes)
    context = {
        "endpoint": endpoint,
        "charts": metric_charts(samples, minutes),
        "window": str(minutes),
        # Refresh only while the endpoint runs; a stopped one produces no new samples.
        "live": endpoint.status not in NOT_SERVING,
        "tab": "metrics",
    }
    if request.htmx:
        return render(request, "deployments/metrics.html#charts", context)
    return render(request, "deployments/metrics.html", context)


@require_GET
@console_view
def endpoint_events(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    endpoint = queries.get_endpoint(actor_of(request), slug)
    context = {"endpoint": endpoint, "events": queries.recent_events(endpoint, limit=200)}
    if request.htmx:
        return render(request, "deployments/events.html#timeline", context)
    return render(request, "deployments/events.html", {**context, "tab": "events"})


# --- logs --------------------------------------------------------------------------------------

LOG_TAIL_CHOICES = (100, 300, 1000, 5000)
LOG_TAIL_DEFAULT = 300
# How often a followed log asks for new lines (htmx polling: works under WSGI and ASGI alike,
# and each poll is one short read rather than a connection held per viewer).
LOG_FOLLOW_INTERVAL_S = 2
_UNSAFE_IN_FILENAME = re.compile(r"[^A-Za-z0-9._-]")
# The level menu: a level keeps itself and those more severe (DEBUG would keep everything).
LOG_LEVEL_CHOICES = (
    ("INFO", "Info and up"),
    ("WARNING", "Warnings and errors"),
    ("ERROR", "Errors"),
)


def _role_order(role: str) -> int:
    return logs.ROLES.index(role) if role in logs.ROLES else len(logs.ROLES)


@dataclass(frozen=True)
class LogOptions:
    """The logs page's controls, read from its query string (unknown values: the defaults)."""

    replica: str | None
    tail: int
    timestamps: bool
    follow: bool
    previous: bool
    role: str | None = None
    q: str = ""
    level: str = ""

    @classmethod
    def of(cls, request: HttpRequest) -> LogOptions:
        tail = _number(request.GET.get("tail"))
        role = request.GET.get("role") or None
        level = request.GET.get("level", "")
        return cls(
            replica=request.GET.get("replica") or None,
            tail=tail if tail in LOG_TAIL_CHOICES else LOG_TAIL_DEFAULT,
            timestamps=request.GET.get("timestamps") == "1",
            follow=request.GET.get("follow") == "1",
            previous=request.GET.get("previous") == "1",
            role=role if role in logs.ROLES else None,
            # A search longer than the API allows is cut, not refused: the page stays usable.
            q=request.GET.get("q", "").strip()[: logs.MAX_SEARCH],
            level=level if level in logs.LEVELS else "",
        )

    @property
    def filtered(self) -> bool:
        return bool(self.q or self.level)

    def query(self, replica: str, **extra: str) -> str:
        """These options (for ``replica``) as a query string, with ``extra`` parameters."""
        params = QueryDict(mutable=True)
        params["replica"] = replica
        params["tail"] = str(self.tail)
        for name in ("timestamps", "follow", "previous"):
            if getattr(self, name):
                params[name] = "1"
        for name in ("role", "q", "level"):
            if getattr(self, name):
                params[name] = getattr(self, name)
        params.update(extra)
        return params.urlencode()


@require_GET
@console_view
def endpoint_logs(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    """One replica's log, with controls; following polls for the lines after a cursor.

    Developers and up: a log can hold what users sent (the API's rule too).
    """
    actor = actor_of(request)
    require_role(actor, Role.DEVELOPER)
    endpoint = queries.get_endpoint(actor, slug)
    options = LogOptions.of(request)
    polling = bool(request.htmx) and "after" in request.GET
    after = request.GET.get("after") or None
    context: dict[str, Any] = {
        "endpoint": endpoint,
        "options": options,
        "tail_choices": LOG_TAIL_CHOICES,
        "levels": LOG_LEVEL_CHOICES,
        "follow_interval": LOG_FOLLOW_INTERVAL_S,
        "tab": "logs",
    }
    try:
        found = logs.read_logs(
            endpoint,
            replica=options.replica,
            role=options.role,
            tail=options.tail,
            previous=options.previous,
            after=after if polling else None,
            fallback=True,  # the menu may name a pod that was replaced since
            q=options.q,
            level=options.level,
        )
    except logs.LogsUnavailable as exc:
        found, context["unavailable"] = None, exc.message
    except ServiceError as exc:  # e.g. previous of a replica that has not restarted
        found, context["problem"] = None, exc.detail
    replica = found.replica if found else options.replica or ""
    sources = found.replicas if found else ()
    context |= {
        "found": found,
        "replica": replica,
        "roles": sorted({s.role for s in sources}, key=_role_order),
        "role_replicas": [s for s in sources if not options.role or s.role == options.role],
        "cursor": found.cursor if found else after or "",
        "download_query": options.query(replica),
    }
    context["follow_query"] = options.query(replica, after=context["cursor"])
    if polling:
        return render(request, "deployments/logs.html#poll", context)
    if request.htmx:
        return render(request, "deployments/logs.html#tail", context)
    return render(request, "deployments/logs.html", context)


@require_GET
@console_view
def endpoint_logs_download(request: HttpRequest, slug: str) -> HttpResponse:
    """The replica's last lines (as many as one read gives) as a text file."""
    actor = actor_of(request)
    require_role(actor, Role.DEVELOPER)
    endpoint = queries.get_endpoint(actor, slug)
    options = LogOptions.of(request)
    try:
        found = logs.read_logs(
            endpoint,
            replica=options.replica,
            role=options.role,
            tail=logs.MAX_LINES,
            previous=options.previous,
            fallback=True,
            q=options.q,
            level=options.level,
        )
    except logs.LogsUnavailable as exc:
        return error_answer(request, 503, f"Logs cannot be read right now: {exc.message}")
    except ServiceError as exc:
        return error_answer(request, 400, exc.detail)
    text = "".join(
        f"{line.ts.isoformat()} {line.text}\n"
        if options.timestamps and line.ts
        else f"{line.text}\n"
        for line in found.lines
    )
    suffix = "-previous" if options.previous else ""
    name = _UNSAFE_IN_FILENAME.sub("_", f"{endpoint.slug}-{found.replica or 'none'}{suffix}.log")
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
