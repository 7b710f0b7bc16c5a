"""Prometheus metrics (served on their own port) and the structured access log.

Metric children are cached per label set: ``.labels()`` hashes its arguments on every call,
which is measurable at tens of thousands of requests per second.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TextIO

import orjson
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import REGISTRY

LATENCY_BUCKETS = (
    *(0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075),
    *(0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)

REQUESTS = Counter(
    "plinth_gateway_requests", "Requests answered, by endpoint and status.", ["endpoint", "status"]
)
ADDED_LATENCY = Histogram(
    "plinth_gateway_added_latency_seconds",
    "Time the gateway itself adds: before the request goes upstream plus relaying the answer.",
    ["endpoint"],
    buckets=LATENCY_BUCKETS,
)
TOKENS = Counter("plinth_gateway_tokens", "Tokens reported by the engine.", ["endpoint", "kind"])
UPSTREAM_ERRORS = Counter(
    "plinth_gateway_upstream_errors",
    "Requests the router could not answer.",
    ["endpoint", "reason"],
)
ROUTER_EJECTIONS = Counter(
    "plinth_gateway_router_ejections",
    "Times a cluster's router was taken out of an endpoint's routes (gateway.health), by why: "
    "probe (its readiness failed), request (a request reached no engine there), answers (5xx).",
    ["cluster", "reason"],
)
CLUSTER_RETRIES = Counter(
    "plinth_gateway_cluster_retries",
    "Requests sent again to another cluster because they reached no engine in the first.",
    ["endpoint", "cluster"],
)
HELD = Gauge(
    "plinth_gateway_held_requests",
    "Requests waiting for a scaled-to-zero endpoint to wake.",
    ["endpoint"],
)
ADMISSION_WAITING = Gauge(
    "plinth_gateway_admission_waiting",
    "Requests waiting for an in-flight slot of an overloaded endpoint (gateway.admission).",
    ["endpoint"],
)
ADMISSION_IN_FLIGHT = Gauge(
    "plinth_gateway_admission_in_flight",
    "Requests holding an in-flight slot of an endpoint with an admission limit.",
    ["endpoint"],
)
ADMISSION_SHED = Counter(
    "plinth_gateway_admission_shed",
    "Requests refused with 429 by fair admission, by the refused request's priority and why "
    "(queue_full: the newest of the lowest class; wait_exceeded: waited the longest allowed).",
    ["endpoint", "priority", "reason"],
)
CONFINED_SLOTS = Gauge(
    "plinth_gateway_confined_slots",
    "Replica slots a key over its fair share of a contended endpoint is confined to (gateway."
    "admission isolation), by its key prefix and the slots; absent while it is not confined.",
    ["endpoint", "key", "slots"],
)

ROUTE_TABLE_AGE = Gauge(
    "plinth_gateway_route_table_age_seconds",
    "Seconds since this gateway's route table was last loaded (since it started, before the "
    "first load). Grows past the refresh period only while loads fail.",
)


class RouteTableClock:
    """When the route table was last loaded; read by the age gauge at scrape time."""

    def __init__(self) -> None:
        self.loaded_at = time.monotonic()  # the gateway's start stands in for the first load

    def loaded(self) -> None:
        self.loaded_at = time.monotonic()

    def age(self) -> float:
        return time.monotonic() - self.loaded_at


ROUTE_TABLE_CLOCK = RouteTableClock()
ROUTE_TABLE_AGE.set_function(ROUTE_TABLE_CLOCK.age)


@lru_cache(maxsize=4096)
def requests_counter(endpoint: str, status: int) -> Any:
    return REQUESTS.labels(endpoint, str(status))


@lru_cache(maxsize=1024)
def latency_histogram(endpoint: str) -> Any:
    return ADDED_LATENCY.labels(endpoint)


@lru_cache(maxsize=1024)
def token_counters(endpoint: str) -> tuple[Any, Any, Any]:
    return (
        TOKENS.labels(endpoint, "prompt"),
        TOKENS.labels(endpoint, "completion"),
        TOKENS.labels(endpoint, "cached"),
    )


@lru_cache(maxsize=1024)
def _admission_children(endpoint: str) -> tuple[Any, Any]:
    return ADMISSION_WAITING.labels(endpoint), ADMISSION_IN_FLIGHT.labels(endpoint)


def admission_gauges(endpoint: str, waiting: int, in_flight: int) -> None:
    waiting_gauge, in_flight_gauge = _admission_children(endpoint)
    waiting_gauge.set(waiting)
    in_flight_gauge.set(in_flight)


def confined_slots(
    endpoint: str, key_prefix: str, before: frozenset[int] | None, now: frozenset[int] | None
) -> None:
    """A key's confinement changed from the slots ``before`` to ``now`` (None: not confined)."""
    if before is not None:
        CONFINED_SLOTS.remove(endpoint, key_prefix, _slot_list(before))
    if now is not None:
        CONFINED_SLOTS.labels(endpoint, key_prefix, _slot_list(now)).set(len(now))


def _slot_list(slots: frozenset[int]) -> str:
    return ",".join(str(s) for s in sorted(slots))


def start_metrics_server(host: str, port: int, registry: CollectorRegistry = REGISTRY) -> Any:
    """A tiny HTTP server in a thread, apart from the inference port. Returns it for shutdown."""
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server


class AccessLog:
    """JSON lines written in batches: one write per burst of requests rather than one per request.

    A line waits at most ``flush_seconds`` (written at shutdown too; lost only if the process is
    killed). Per-request ``logging`` records and their write cost a tenth of the gateway's CPU
    per request; a proxy's access log is buffered for the same reason (nginx's ``buffer=``).
    """

    def __init__(self, flush_seconds: float = 0.05) -> None:
        self.stream: TextIO | None = None  # None: the log is off
        self._flush_seconds = flush_seconds
        self._lines: list[str] = []
        self._timer: asyncio.TimerHandle | None = None

    def write(self, line: str) -> None:
        self._lines.append(line)
        if self._timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no event loop to flush later from: write now
            self.flush()
            return
        self._timer = loop.call_later(self._flush_seconds, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        lines, self._lines = self._lines, []
        if lines and self.stream is not None:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()


ACCESS_LOG = AccessLog()


def configure_access_log(stream: TextIO | None = None) -> None:
    """One bare JSON line per request on ``stream`` (stdout by default)."""
    ACCESS_LOG.stream = stream or sys.stdout


@dataclass(slots=True)
class AccessRecord:
    request_id: str
    method: str
    path: str
    started: float  # perf_counter
    endpoint: str = ""
    key_prefix: str = ""
    status: int = 0
    error: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    finished: float = 0.0  # perf_counter when the answer was complete
    finished_at: float = 0.0  # the same moment as epoch seconds

    def finish(self) -> None:
        self.finished, self.finished_at = time.perf_counter(), time.time()

    def emit(self) -> None:
        """Write the line (possibly a while after ``finish``: times are those of the finish)."""
        if ACCESS_LOG.stream is None:
            return
        if not self.finished:
            self.finish()
        duration_ms = (self.finished - self.started) * 1000
        line: dict[str, Any] = {
            "ts": round(self.finished_at, 3),
            "request_id": self.request_id,
            "method": self.method,
            "path": self.path,
            "endpoint": self.endpoint,
            "key_prefix": self.key_prefix,
            "status": self.status,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "duration_ms": round(duration_ms, 3),
        }
        if self.error:
            line["error"] = self.error
        ACCESS_LOG.write(orjson.dumps(line).decode())
