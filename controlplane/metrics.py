"""The control plane's Prometheus metrics and the ``/metrics`` answer that serves them.

Measured here: every console and API request, by route (the URL pattern, never the path, whose
ids would make a series per endpoint and key), method and status. The deployments domain adds
the families it computes when Prometheus scrapes (endpoints by status, task queue depth,
reconcile passes) through ``register_collector``: the platform does not import the domain.

``/metrics`` is answered by the first middleware, before anything reads the Host header:
Prometheus scrapes a pod by its address, which ``ALLOWED_HOSTS`` does not list. Who may read it:
with ``PLINTH_METRICS_TOKEN`` set, a request carrying ``Authorization: Bearer <token>``; without
it, only a client on this machine (loopback, and not relayed by a proxy, whose request would
arrive from loopback whoever sent it). Refused requests get 403; nothing else is shown to them.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import ResolverMatch
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

__all__ = ["METRICS_PATH", "REGISTRY", "MetricsMiddleware", "may_read_metrics"]

METRICS_PATH = "/metrics"
# Plinth's own registry: what the gateway or a test registers in the process-wide default one
# stays out of the control plane's answer. Not auto-described, so registering a collector that
# queries the database does not run that query at start-up.
REGISTRY = CollectorRegistry(auto_describe=False)
for _collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
    REGISTRY.register(_collector)

# Console pages and API calls: a few ms to a few seconds (a slow query, a busy pool).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REQUEST_DURATION = Histogram(
    "plinth_http_request_duration_seconds",
    "Time to answer a console or API request, by route (URL pattern) and method.",
    ["route", "method"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
REQUESTS = Counter(
    "plinth_http_requests",
    "Console and API requests answered, by route (URL pattern), method and status.",
    ["route", "method", "status"],
    registry=REGISTRY,
)
# A path no URL pattern matched (a 404, a scanner): one series for all of them.
UNMATCHED = "unmatched"
# Any other method string a client sends is one label value, not a new series each.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Headers a proxy adds: a request carrying one came through it, not from this machine.
_RELAYED = ("HTTP_X_FORWARDED_FOR", "HTTP_FORWARDED", "HTTP_X_REAL_IP")


_registered: dict[str, Collector] = {}


def register_collector(name: str, collector: Collector) -> None:
    """Serve ``collector``'s families from ``/metrics``. Registering a name again replaces the
    earlier collector (an app's ``ready`` may run twice in tests)."""
    previous = _registered.pop(name, None)
    if previous is not None:
        REGISTRY.unregister(previous)
    REGISTRY.register(collector)
    _registered[name] = collector


class MetricsMiddleware:
    """First in the chain: answers ``/metrics`` itself, and times every other request.

    The time is until the response is handed back: a streamed body's transfer is not in it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path == METRICS_PATH:
            return metrics_answer(request)
        started = time.perf_counter()
        response = self.get_response(request)
        elapsed = time.perf_counter() - started
        route, method = route_of(request), _method(request)
        REQUEST_DURATION.labels(route, method).observe(elapsed)
        REQUESTS.labels(route, method, str(response.status_code)).inc()
        return response


def route_of(request: HttpRequest) -> str:
    """The URL pattern that answered, e.g. ``/api/v1/deployments/<deployment_id>``."""
    match: ResolverMatch | None = getattr(request, "resolver_match", None)
    route: str | None = match.route if match is not None else None
    return UNMATCHED if route is None else "/" + route


def _method(request: HttpRequest) -> str:
    method = (request.method or "").upper()
    return method if method in METHODS else "other"


def metrics_answer(request: HttpRequest) -> HttpResponse:
    if request.method not in ("GET", "HEAD"):
        answer = HttpResponse("only GET\n", status=405, content_type="text/plain")
        answer["Allow"] = "GET, HEAD"
        return answer
    if not may_read_metrics(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(REGISTRY), content_type=content_type)


def may_read_metrics(request: HttpRequest) -> bool:
    """The bearer token when one is set; otherwise a client on this machine only."""
    token: str = settings.PLINTH_METRICS_TOKEN
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), token.encode()
        )
    if any(header in request.META for header in _RELAYED):
        return False
    try:
        address = ipaddress.ip_address(str(request.META.get("REMOTE_ADDR", "")))
    except ValueError:
        return False
    return address.is_loopback
