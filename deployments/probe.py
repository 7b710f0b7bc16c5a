"""The probe: read every ready replica's ``/metrics`` and ``/v1/loads`` and store a MetricSample.

Counters and histograms are kept per replica URL in the cache between probes, so a sample holds
the figures of its interval only (a restarted replica starts a new series, never a negative
one). Gauges (running, queued, KV usage) are as of the probe.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from deployments import reconcile
from deployments.models import Deployment, MetricSample
from runtime.client import EngineClient, RuntimeUnavailable
from runtime.metrics import MetricsSnapshot, merge

log = logging.getLogger(__name__)

TTFT = "sglang:time_to_first_token_seconds"
ITL = "sglang:inter_token_latency_seconds"


def _cache_key(deployment_id: str) -> str:
    return f"probe:{deployment_id}"


def _scrape(urls: list[str]) -> tuple[dict[str, MetricsSnapshot], float]:
    """Snapshots per URL, and the queued requests /v1/loads reports (summed)."""
    snapshots: dict[str, MetricsSnapshot] = {}
    queued = 0.0
    for url in urls:
        with EngineClient(url, timeout=2.0) as engine:
            try:
                snapshots[url] = engine.metrics()
                loads = engine.loads().get("loads") or []
            except RuntimeUnavailable as exc:
                log.info("probe skipped %s: %s", url, exc)
                continue
        queued += sum(float(entry.get("num_waiting_reqs", 0) or 0) for entry in loads)
    return snapshots, queued


def probe(deployment_id: str) -> MetricSample | None:
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    if deployment is None:
        return None
    urls = [r["url"] for r in deployment.replica_facts or [] if r.get("ready") and r.get("url")]
    now = timezone.now()
    snapshots, queued = _scrape(urls)
    previous: dict[str, Any] = cache.get(_cache_key(deployment_id)) or {}
    cache.set(
        _cache_key(deployment_id),
        {"ts": now, "snapshots": {u: s.to_dict() for u, s in snapshots.items()}},
        timeout=3600,
    )
    reconcile.record_probe(deployment, now)
    if not snapshots:
        return None
    before = {u: MetricsSnapshot.from_dict(d) for u, d in previous.get("snapshots", {}).items()}
    # A replica seen for the first time contributes gauges only: its counters cover its lifetime.
    interval = merge(s.delta(before.get(u, s)) for u, s in snapshots.items())
    gauges = merge(snapshots.values())
    seconds = (now - previous["ts"]).total_seconds() if previous.get("ts") else 0.0
    return MetricSample.objects.create(
        deployment=deployment, ts=now, interval_s=seconds, replicas_ready=len(snapshots),
        **_figures(interval, gauges, seconds, queued),
    )  # fmt: skip


def _figures(
    interval: MetricsSnapshot, gauges: MetricsSnapshot, seconds: float, queued: float
) -> dict[str, Any]:
    requests = interval.counter("sglang:num_requests_total")
    prompt = interval.counter("sglang:prompt_tokens_total")
    generated = interval.counter("sglang:generation_tokens_total")
    cached = interval.counter("sglang:cached_tokens_total")
    return {
        "requests": requests,
        "prompt_tokens": prompt,
        "generation_tokens": generated,
        "cached_tokens": cached,
        "requests_per_s": requests / seconds if seconds else 0.0,
        "tokens_per_s": generated / seconds if seconds else 0.0,
        "ttft_p50": interval.percentile(TTFT, 0.5),
        "ttft_p90": interval.percentile(TTFT, 0.9),
        "itl_p50": interval.percentile(ITL, 0.5),
        "itl_p90": interval.percentile(ITL, 0.9),
        "running": gauges.gauge("sglang:num_running_reqs") or 0.0,
        "queued": max(queued, gauges.gauge("sglang:num_queue_reqs") or 0.0),
        "kv_usage": gauges.gauge_mean("sglang:token_usage"),
        "cache_hit_rate": cached / prompt if prompt else gauges.gauge_mean("sglang:cache_hit_rate"),
        "spec_accept_length": gauges.gauge_mean("sglang:spec_accept_length"),
    }


def purge_old_samples(now: Any = None) -> int:
    """Delete samples older than ``PLINTH_METRICS_RETENTION_HOURS``; returns how many."""
    hours = float(getattr(settings, "PLINTH_METRICS_RETENTION_HOURS", 24 * 7))
    cutoff = (now or timezone.now()) - timedelta(hours=hours)
    deleted, _ = MetricSample.objects.filter(ts__lt=cutoff).delete()
    return deleted
