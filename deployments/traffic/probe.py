"""The probe: read every ready replica's ``/metrics`` and ``/v1/loads`` and store a MetricSample.

Counters and histograms are kept per replica in the cache between probes, so a sample holds the
figures of its interval only. A replica seen for the first time contributes everything its
engine counted since it started (the requests served before the first probe are in no earlier
sample); a restarted one (a new restart count, or counters that went down) starts a new series,
never a negative one. Gauges (running, queued, KV usage) are as of the probe. The probe writes
its own observed fact (``last_probe_at``) here, and nothing else of the deployment's.

While a canary runs, its pool's replicas (``Canary.replica_facts``) are read too: the sample's
figures are the endpoint's as its callers see them (both revisions), and ``revisions`` keeps each
revision's own requests, throughput and TTFT/ITL percentiles, which the canary watcher compares.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from controlplane.crypto import engine_api_key
from deployments.endpoints.models import Deployment
from deployments.experiments.queries import running_canary_replicas
from deployments.traffic.models import MetricSample
from runtime.client import EngineClient, RuntimeUnavailable
from runtime.metrics import MetricsSnapshot, merge, split_name

log = logging.getLogger(__name__)

TTFT = "sglang:time_to_first_token_seconds"
ITL = "sglang:inter_token_latency_seconds"


def _cache_key(deployment_id: str) -> str:
    return f"probe:{deployment_id}"


def _series(replica: dict[str, Any]) -> str:
    """One engine process' counters: its address and how often it was restarted there (a
    restarted container keeps its pod's address and counts from zero again)."""
    return f"{replica['url']}#{replica.get('restarts') or 0}"


def _scrape(
    replicas: dict[str, str], api_key: str = ""
) -> tuple[dict[str, MetricsSnapshot], float, dict[str, dict[str, float]]]:
    """Snapshots per series (``replicas`` maps series to URL), the queued requests /v1/loads
    reports (summed), and each series' queued requests and prompt tokens still to prefill
    (``num_total_tokens - num_used_tokens``: what the SLO autoscaler reads). /v1/loads is
    behind the endpoint's engine key."""
    snapshots: dict[str, MetricsSnapshot] = {}
    queued = 0.0
    waiting: dict[str, dict[str, float]] = {}
    for series, url in replicas.items():
        with EngineClient(url, timeout=2.0, api_key=api_key) as engine:
            try:
                snapshots[series] = engine.metrics()
                loads = engine.loads().get("loads") or []
            except RuntimeUnavailable as exc:
                log.info("probe skipped %s: %s", url, exc)
                continue
        mine = sum(float(entry.get("num_waiting_reqs", 0) or 0) for entry in loads)
        tokens = sum(
            max(0.0, float(e.get("num_total_tokens") or 0) - float(e.get("num_used_tokens") or 0))
            for e in loads
        )
        waiting[series] = {"queued": mine, "queued_tokens": tokens}
        queued += mine
    return snapshots, queued, waiting


def probe(deployment_id: str) -> MetricSample | None:
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    if deployment is None:
        return None
    ready = [r for r in _replica_facts(deployment) if r.get("ready") and r.get("url")]
    replicas = {_series(r): r["url"] for r in ready}
    facts = {_series(r): r for r in ready}
    now = timezone.now()
    snapshots, queued, waiting = _scrape(replicas, engine_api_key(str(deployment.pk)))
    previous: dict[str, Any] = cache.get(_cache_key(deployment_id)) or {}
    cache.set(
        _cache_key(deployment_id),
        {"ts": now, "snapshots": {u: s.to_dict() for u, s in snapshots.items()}},
        timeout=_baseline_timeout_s(),
    )
    since = previous.get("ts") or deployment.last_probe_at or deployment.first_ready_at
    _record_probe(deployment, now)
    if not snapshots:
        return None
    before = {u: MetricsSnapshot.from_dict(d) for u, d in previous.get("snapshots", {}).items()}
    # A series seen for the first time is measured from zero: from its engine's start.
    interval = merge(s.delta(before.get(u)) for u, s in snapshots.items())
    gauges = merge(snapshots.values())
    seconds = max(0.0, (now - since).total_seconds()) if since else 0.0
    per_replica = [
        {**_replica_figures(facts[u], s.delta(before.get(u)), s, seconds), **waiting.get(u, {})}
        for u, s in snapshots.items()
    ]
    by_revision = _by_revision(facts, snapshots, before, seconds)
    return MetricSample.objects.create(
        deployment=deployment, ts=now, interval_s=seconds, replicas_ready=len(snapshots),
        replicas=per_replica, revisions=by_revision,
        **_figures(interval, gauges, seconds, queued),
    )  # fmt: skip


def _replica_facts(deployment: Deployment) -> list[dict[str, Any]]:
    """The endpoint's replicas, and its running canary's (one more query)."""
    return [*(deployment.replica_facts or []), *running_canary_replicas(deployment)]


def _by_revision(
    facts: dict[str, dict[str, Any]],
    snapshots: dict[str, MetricsSnapshot],
    before: dict[str, MetricsSnapshot],
    seconds: float,
) -> dict[str, dict[str, Any]]:
    """Each revision's figures of the interval, when more than one revision served."""
    groups: dict[str, list[MetricsSnapshot]] = {}
    for series, snapshot in snapshots.items():
        revision = facts[series].get("revision")
        groups.setdefault(str(revision), []).append(snapshot.delta(before.get(series)))
    if len(groups) < 2:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for revision, deltas in groups.items():
        out[revision] = _traffic(merge(deltas), seconds)
    return out


def _traffic(interval: MetricsSnapshot, seconds: float) -> dict[str, Any]:
    """Requests, rates and latency percentiles of one interval (a sample's, or one revision's)."""
    requests = interval.counter("sglang:num_requests_total")
    generated = interval.counter("sglang:generation_tokens_total")
    return {
        "requests": requests,
        "requests_per_s": requests / seconds if seconds else 0.0,
        "tokens_per_s": generated / seconds if seconds else 0.0,
        "ttft_p50": interval.percentile(TTFT, 0.5),
        "ttft_p90": interval.percentile(TTFT, 0.9),
        "itl_p50": interval.percentile(ITL, 0.5),
        "itl_p90": interval.percentile(ITL, 0.9),
    }


def _replica_figures(
    fact: dict[str, Any], interval: MetricsSnapshot, gauges: MetricsSnapshot, seconds: float
) -> dict[str, Any]:
    """One replica's share of a sample, named and tagged with the revision it runs, so the
    console can draw a line per replica and per revision (during a rollout or canary both run)."""
    requests = interval.counter("sglang:num_requests_total")
    generated = interval.counter("sglang:generation_tokens_total")
    return {
        "name": fact.get("name") or fact.get("url"),
        "revision": fact.get("revision"),
        "requests_per_s": requests / seconds if seconds else 0.0,
        "tokens_per_s": generated / seconds if seconds else 0.0,
        "running": gauges.gauge("sglang:num_running_reqs") or 0.0,
        "kv_usage": gauges.gauge_mean("sglang:token_usage"),
        # What the SLO autoscaler reads per prefill/decode pool (``deployments.autoscaling.tasks``).
        "role": fact.get("role"),
        "requests": requests,
        "prompt_tokens": interval.counter("sglang:prompt_tokens_total"),
        "cached_tokens": interval.counter("sglang:cached_tokens_total"),
        "ttft_p90": interval.percentile(TTFT, 0.9),
        "itl_p90": interval.percentile(ITL, 0.9),
    }


def _record_probe(deployment: Deployment, at: datetime) -> None:
    """The probe's one observed fact: when it last read the replicas. A conditional UPDATE of
    that field only, so nothing reconcile or a person wrote meanwhile is overwritten."""
    Deployment.objects.filter(pk=deployment.pk).update(last_probe_at=at)


def _figures(
    interval: MetricsSnapshot, gauges: MetricsSnapshot, seconds: float, queued: float
) -> dict[str, Any]:
    prompt = interval.counter("sglang:prompt_tokens_total")
    cached = interval.counter("sglang:cached_tokens_total")
    return {
        **_traffic(interval, seconds),
        "prompt_tokens": prompt,
        "generation_tokens": interval.counter("sglang:generation_tokens_total"),
        "cached_tokens": cached,
        "running": gauges.gauge("sglang:num_running_reqs") or 0.0,
        "queued": max(queued, gauges.gauge("sglang:num_queue_reqs") or 0.0),
        "kv_usage": gauges.gauge_mean("sglang:token_usage"),
        "cache_hit_rate": cached / prompt if prompt else gauges.gauge_mean("sglang:cache_hit_rate"),
        "cache_tiers": tier_hit_rates(interval, prompt),
        "spec_accept_length": gauges.gauge_mean("sglang:spec_accept_length"),
    }


CACHE_TIERS = ("device", "host", "storage")


def tier_hit_rates(interval: MetricsSnapshot, prompt: float) -> dict[str, float]:
    """The share of prompt tokens each KV tier served (SGLang's ``cache_source``: the GPU's own
    cache, HiCache's host memory, its storage); {} for an engine without HiCache's tiers."""
    counts = {
        tier: interval.counters.get(split_name("sglang:cached_tokens_total", "cache_source", tier))
        for tier in CACHE_TIERS
    }
    if not prompt or (counts["host"] is None and counts["storage"] is None):
        return {}
    return {tier: (count or 0.0) / prompt for tier, count in counts.items()}


def _baseline_timeout_s() -> int:
    # As long as samples are kept: a baseline forgotten while its engine runs would count the
    # engine's whole history again in the next sample.
    return settings.PLINTH_METRICS_RETENTION_HOURS * 3600


def purge_old_samples(now: Any = None) -> int:
    """Delete samples older than ``PLINTH_METRICS_RETENTION_HOURS``; returns how many."""
    hours = settings.PLINTH_METRICS_RETENTION_HOURS
    cutoff = (now or timezone.now()) - timedelta(hours=hours)
    deleted, _ = MetricSample.objects.filter(ts__lt=cutoff).delete()
    return deleted
