"""Prometheus metrics under SGLang 0.5.23's names, labels and default buckets.

Scheduler metrics carry ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank``, request-level
(tokenizer) metrics ``model_name, engine_type``, both plus ``--extra-metric-labels``; the HTTP-layer
metrics carry no model labels, as in SGLang. Latencies are in simulated seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
    0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
E2E_BUCKETS = (*TTFT_BUCKETS, 800, 1200, 1600, 2000, 2400)
TOKEN_BUCKETS = (
    100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
    12000, 15000, 20000, 22000, 25000, 30000, 35000, 40000, 66000, 99000, 132000, 300000,
)  # fmt: skip
QUEUE_BUCKETS = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 60, 120, 300)
# P/D KV transfer histograms (decode side), in SGLang's units: ms, GB/s, MB.
KV_MS_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
KV_SPEED_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 20, 30, 40, 50, 75, 100, 200)
KV_MB_BUCKETS = (0.1, 1, 5, 10, 50, 100, 250, 500, 1000, 2500, 5000, 10000)

SCHEDULER_GAUGES = (
    "num_running_reqs",
    "num_queue_reqs",
    "num_grammar_queue_reqs",
    "gen_throughput",
    "cache_hit_rate",
    "decode_sum_seq_lens",
    "token_usage",
    "num_used_tokens",
    "kv_available_tokens",
    "kv_evictable_tokens",
    "kv_used_tokens",
    "max_total_num_tokens",
    "utilization",
    "new_token_ratio",
    "is_cuda_graph",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_steps",
    "spec_num_draft_tokens",
    "num_retracted_reqs",
    "num_paused_reqs",
    "num_prefill_bootstrap_queue_reqs",
    "num_prefill_inflight_queue_reqs",
    "num_decode_prealloc_queue_reqs",
    "num_decode_transfer_queue_reqs",
    "weight_memory_usage_gb",
    "kv_cache_memory_usage_gb",
    "context_len",
    "page_size",
    "num_pages",
    "hicache_host_used_tokens",
    "hicache_host_total_tokens",
    "lora_pool_slots_used",
    "lora_pool_slots_total",
    "lora_pool_utilization",
)
SCHEDULER_COUNTERS = (
    "num_retracted_requests",
    "num_retracted_input_tokens",
    "num_retracted_output_tokens",
    "evicted_tokens",
    "num_bootstrap_failed_reqs",
    "num_transfer_failed_reqs",
    # HiCache's storage tier (SGLang's StorageMetricsCollector)
    "prefetched_tokens",
    "backuped_tokens",
    "storage_prefetch_hit_tokens",
)
# HiCache's tier movements, by pool (SGLang's RadixCacheMetricsCollector).
POOL_COUNTERS = ("load_back_tokens", "hicache_backup_tokens")


@dataclass(frozen=True)
class FinishedRequest:
    """What the request-level metrics need from one finished request (simulated seconds)."""

    streaming: bool
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int  # all tiers
    queue_time: float
    ttft: float
    e2e: float
    aborted: bool = False
    cached_host: int = 0  # of cached_tokens, loaded back from HiCache's host tier
    cached_storage: int = 0  # ... and prefetched from its storage tier


class EngineMetrics:
    def __init__(
        self, model_name: str, engine_type: str, extra_labels: dict[str, str] | None = None
    ) -> None:
        extra = dict(extra_labels or {})
        self.registry = CollectorRegistry(auto_describe=True)
        self.request_labels = {"model_name": model_name, "engine_type": engine_type, **extra}
        ranks = {"tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        self.scheduler_labels = {"model_name": model_name, "engine_type": engine_type}
        self.scheduler_labels.update({**ranks, **extra})
        self._counter_seen: dict[str, float] = {}
        self._build_scheduler_metrics()
        self._build_request_metrics()
        self._build_http_metrics()

    # ---- definitions -------------------------------------------------------------------------
    def _build_scheduler_metrics(self) -> None:
        names = list(self.scheduler_labels)
        self.gauges = {
            name: Gauge(f"sglang:{name}", name.replace("_", " "), names, registry=self.registry)
            for name in SCHEDULER_GAUGES
        }
        self.counters = {
            name: Counter(f"sglang:{name}", name.replace("_", " "), names, registry=self.registry)
            for name in SCHEDULER_COUNTERS
        }
        self.pool_counters = {
            name: Counter(
                f"sglang:{name}", name.replace("_", " "), [*names, "pool"], registry=self.registry
            )
            for name in POOL_COUNTERS
        }
        self.realtime_tokens = Counter(
            "sglang:realtime_tokens",
            "Tokens processed by the forward passes, by mode",
            [*names, "mode"],
            registry=self.registry,
        )
        self.kv_transfer = {
            name: Histogram(
                f"sglang:{name}",
                name.replace("_", " "),
                names,
                buckets=buckets,
                registry=self.registry,
            )
            for name, buckets in (
                ("kv_transfer_latency_ms", KV_MS_BUCKETS),
                ("kv_transfer_speed_gb_s", KV_SPEED_BUCKETS),
                ("kv_transfer_total_mb", KV_MB_BUCKETS),
                ("kv_transfer_bootstrap_ms", KV_MS_BUCKETS),
                ("kv_transfer_alloc_ms", KV_MS_BUCKETS),
            )
        }
        self.queue_time = Histogram(
            "sglang:queue_time_seconds",
            "Time a request waited before its prefill started",
            names,
            buckets=QUEUE_BUCKETS,
            registry=self.registry,
        )

    def _build_request_metrics(self) -> None:
        names = list(self.request_labels)
        streaming = [*names, "is_streaming"]

        def counter(name: str, labels: list[str]) -> Counter:
            return Counter(f"sglang:{name}", name.replace("_", " "), labels, registry=self.registry)

        def histogram(name: str, labels: list[str], buckets: tuple[float, ...]) -> Histogram:
            return Histogram(
                f"sglang:{name}",
                name.replace("_", " "),
                labels,
                buckets=buckets,
                registry=self.registry,
            )

        self.prompt_tokens = counter("prompt_tokens", streaming)
        self.generation_tokens = counter("generation_tokens", streaming)
        self.num_requests = counter("num_requests", streaming)
        self.num_aborted = counter("num_aborted_requests", names)
        self.cached_tokens = counter("cached_tokens", [*names, "cache_source"])
        self.spec_verify_calls = counter("spec_verify_calls", names)
        self.ttft = histogram("time_to_first_token_seconds", streaming, TTFT_BUCKETS)
        self.itl = histogram("inter_token_latency_seconds", names, ITL_BUCKETS)
        self.tpot = histogram("request_time_per_output_token_seconds", streaming, ITL_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds", streaming, E2E_BUCKETS)
        self.prompt_hist = histogram("prompt_tokens_histogram", names, TOKEN_BUCKETS)
        self.uncached_hist = histogram("uncached_prompt_tokens_histogram", names, TOKEN_BUCKETS)
        self.generation_hist = histogram("generation_tokens_histogram", names, TOKEN_BUCKETS)
        self.startup_time = Gauge(
            "sglang:startup_time_seconds",
            "Start-up time by phase",
            [*names, "phase"],
            registry=self.registry,
        )

    def _build_http_metrics(self) -> None:
        self.http_requests = Counter(
            "sglang:http_requests",
            "HTTP requests received",
            ["endpoint", "method"],
            registry=self.registry,
        )
        self.http_responses = Counter(
            "sglang:http_responses",
            "HTTP responses sent",
            ["endpoint", "status_code", "method"],
            registry=self.registry,
        )
        self.http_active = Gauge(
            "sglang:http_requests_active",
            "HTTP requests in progress",
            ["endpoint", "method"],
            registry=self.registry,
        )

    # ---- recording ---------------------------------------------------------------------------
    def set_gauge(self, name: str, value: float) -> None:
        self.gauges[name].labels(**self.scheduler_labels).set(value)

    def set_counter_total(self, name: str, total: float) -> None:
        """Advance a scheduler counter to a running total kept by the scheduler."""
        delta = total - self._counter_seen.get(name, 0.0)
        if delta > 0:
            self.counters[name].labels(**self.scheduler_labels).inc(delta)
            self._counter_seen[name] = total

    def set_pool_total(self, name: str, pool: str, total: float) -> None:
        """Advance a per-pool counter to a running total kept by the engine."""
        seen = f"{name}:{pool}"
        delta = total - self._counter_seen.get(seen, 0.0)
        if delta > 0:
            self.pool_counters[name].labels(**self.scheduler_labels, pool=pool).inc(delta)
            self._counter_seen[seen] = total

    def add_realtime_tokens(self, mode: str, tokens: int) -> None:
        if tokens > 0:
            self.realtime_tokens.labels(**self.scheduler_labels, mode=mode).inc(tokens)

    def observe_kv_transfer(self, seconds: float, kv_bytes: float, bootstrap_s: float) -> None:
        """One KV cache received from a prefill engine (simulated seconds, bytes per rank)."""
        observed = {
            "kv_transfer_latency_ms": seconds * 1e3,
            "kv_transfer_speed_gb_s": kv_bytes / seconds / 1e9 if seconds > 0 else 0.0,
            "kv_transfer_total_mb": kv_bytes / 1e6,
            "kv_transfer_bootstrap_ms": bootstrap_s * 1e3,
            "kv_transfer_alloc_ms": 0.0,
        }
        for name, value in observed.items():
            self.kv_transfer[name].labels(**self.scheduler_labels).observe(value)

    def kv_failed(self, stage: str) -> None:
        """A P/D request that failed in ``bootstrap`` or ``transfer``."""
        self.counters[f"num_{stage}_failed_reqs"].labels(**self.scheduler_labels).inc()

    def observe_queue_time(self, seconds: float) -> None:
        self.queue_time.labels(**self.scheduler_labels).observe(seconds)

    def observe_token_gap(self, seconds: float) -> None:
        self.itl.labels(**self.request_labels).observe(seconds)

    def add_spec_verify_calls(self, calls: int) -> None:
        if calls > 0:
            self.spec_verify_calls.labels(**self.request_labels).inc(calls)

    def observe_finished(self, done: FinishedRequest) -> None:
        labels = self.request_labels
        streaming = {**labels, "is_streaming": "true" if done.streaming else "false"}
        if done.aborted:
            self.num_aborted.labels(**labels).inc()
            return
        self.prompt_tokens.labels(**streaming).inc(done.prompt_tokens)
        self.generation_tokens.labels(**streaming).inc(done.completion_tokens)
        self.num_requests.labels(**streaming).inc()
        # By where the prefix came from, as SGLang's cache_source: the GPU's own radix cache, or
        # HiCache's host and storage tiers.
        device = done.cached_tokens - done.cached_host - done.cached_storage
        self.cached_tokens.labels(**labels, cache_source="device").inc(device)
        if done.cached_host:
            self.cached_tokens.labels(**labels, cache_source="host").inc(done.cached_host)
        if done.cached_storage:
            self.cached_tokens.labels(**labels, cache_source="storage").inc(done.cached_storage)
        self.ttft.labels(**streaming).observe(done.ttft)
        self.e2e.labels(**streaming).observe(done.e2e)
        if done.completion_tokens > 1:
            tpot = (done.e2e - done.ttft) / (done.completion_tokens - 1)
            self.tpot.labels(**streaming).observe(tpot)
        self.prompt_hist.labels(**labels).observe(done.prompt_tokens)
        self.uncached_hist.labels(**labels).observe(done.prompt_tokens - done.cached_tokens)
        self.generation_hist.labels(**labels).observe(done.completion_tokens)

    def set_startup_time(self, phase: str, seconds: float) -> None:
        self.startup_time.labels(**self.request_labels, phase=phase).set(seconds)

    def http_started(self, endpoint: str, method: str) -> None:
        self.http_requests.labels(endpoint=endpoint, method=method).inc()
        self.http_active.labels(endpoint=endpoint, method=method).inc()

    def http_finished(self, endpoint: str, method: str, status: int) -> None:
        self.http_active.labels(endpoint=endpoint, method=method).dec()
        self.http_responses.labels(endpoint=endpoint, status_code=str(status), method=method).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
