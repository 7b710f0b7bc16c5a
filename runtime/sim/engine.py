"""The simulated engine: the scheduler driven in (scaled) real time, plus its observable state.

``run`` is the step loop: plan a step, let its roofline duration pass on the engine's own
simulated clock (``runtime.sim.clock``), commit it. Clock readings (``now``) are simulated seconds
that advance by exactly the step durations, so latencies in responses and metrics read as if the
engine ran on the configured GPU, and do not change when the host is loaded: a late wake-up is owed
and caught up (bounded debt) in real-time mode, and ``--sim-clock fast`` runs busy periods without
sleeping at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from runtime.perf.hardware import GpuShape, ModelShape
from runtime.perf.kv_tiers import step_seconds as tier_step_seconds
from runtime.perf.kv_tiers import tier_links
from runtime.perf.kv_transfer import transfer_link
from runtime.perf.spec import SpecConfig, chain_rate
from runtime.sim.args import EngineArgs
from runtime.sim.clock import ARRIVAL_WAIT_S, SimClock
from runtime.sim.disagg import BootstrapFailed, KvHandoff, KvRegistry, fetch_handoff
from runtime.sim.hicache import HiCache, HiCacheConfig
from runtime.sim.kvpool import KvPool
from runtime.sim.lora import AdapterPool, lora_config, parse_lora_paths
from runtime.sim.memory import MemoryPlan, output_drift
from runtime.sim.metrics import EngineMetrics, FinishedRequest
from runtime.sim.radix import RadixCache
from runtime.sim.request import GenerationParams, SimRequest
from runtime.sim.roofline import Roofline, StepWork
from runtime.sim.sampling import TokenSource, request_key
from runtime.sim.scheduler import Scheduler, SchedulerConfig, Step
from runtime.sim.tokenizer import Tokenizer

SGLANG_VERSION = "0.5.23"
THROUGHPUT_WINDOW_S = 5.0  # simulated seconds behind gen_throughput and utilization
_UNTIL_QUIET = 1 << 30  # an arrival barrier that ends only when arrivals stop


class Engine:
    def __init__(
        self, args: EngineArgs, gpu: GpuShape, model: ModelShape, plan: MemoryPlan
    ) -> None:
        self.args, self.gpu, self.model, self.plan = args, gpu, model, plan
        self.time_scale = args.sim.time_scale
        self.clock = SimClock(args.sim.time_scale, args.sim.clock)
        self.tokenizer = Tokenizer(max(model.vocab_size, 1024))
        cache = RadixCache(plan.page_size, disabled=args.disable_radix_cache)
        self.pool = KvPool(plan.max_total_num_tokens, cache)
        self.roofline = Roofline(args, gpu, model)
        self.hicache = hicache_of(args, plan)
        self.lora = adapter_pool_of(args, model)
        self.tier_links = tier_links(gpu, args.hicache_storage_backend, args.sim.storage_gbs)
        if self.hicache is not None:
            self.hicache.storage_seconds = self.tier_links.storage_seconds
        self.scheduler = Scheduler(
            scheduler_config(args, plan, self.roofline.engine.spec),
            self.pool,
            self.tokenizer,
            self.hicache,
            self.lora,
        )
        engine_type = "unified" if args.disaggregation_mode == "null" else args.disaggregation_mode
        self.metrics = EngineMetrics(args.served_model_name, engine_type, args.extra_metric_labels)
        self.noise = output_drift(args)
        self.default_seed = args.random_seed if args.random_seed is not None else 0
        self._wake = asyncio.Event()
        # Fast clock's arrival barrier (runtime.sim.clock): requests finished and not yet followed
        # by as many arrivals, and an event set on each arrival. 0 disables the barrier.
        self.arrival_wait_s = ARRIVAL_WAIT_S if self.clock.fast else 0.0
        self._returning = 0
        self._arrived = asyncio.Event()
        self._window: deque[tuple[float, int, float]] = deque()  # (end, tokens, busy seconds)
        # (accepted tokens, verify calls) when /metrics last published spec_accept_length.
        self._spec_mark = (0, 0)
        self._spec_interval_length = 0.0
        # P/D: a prefill engine publishes KV by bootstrap room; a decode engine receives it.
        self.kv_registry = KvRegistry()
        self.link = transfer_link(gpu, args.disaggregation_transfer_backend)
        self.transfers_in_flight = 0
        self._receivers: set[asyncio.Task[None]] = set()
        self._report_static_metrics()

    # ---- clock and requests ------------------------------------------------------------------
    def now(self) -> float:
        return self.clock.now()

    def new_request(
        self,
        input_ids: list[int],
        params: GenerationParams,
        *,
        stream: bool,
        seed: int | None = None,
        rid: str | None = None,
        adapter: str | None = None,
    ) -> SimRequest:
        key = request_key(self.default_seed if seed is None else seed, input_ids)
        if self.args.sim.ignore_length_pins:
            params = dataclasses.replace(params, ignore_eos=False, min_new_tokens=0)
        source = TokenSource(
            key, self.args.sim.output_len_mean, self.noise, input_ids, params.temperature, adapter
        )
        return SimRequest(
            rid=rid or uuid.uuid4().hex,
            input_ids=list(input_ids),
            params=params,
            source=source,
            stream=stream,
            arrival=self.now(),
            adapter=adapter,
        )

    def submit(self, req: SimRequest) -> None:
        mode = self.args.disaggregation_mode
        if req.bootstrap is not None and mode == "decode":
            task = asyncio.get_running_loop().create_task(self._receive_kv(req))
            self._receivers.add(task)
            task.add_done_callback(self._receivers.discard)
            return
        if req.bootstrap is not None and mode == "prefill":
            # SGLang's prefill engine computes the prompt and the first token, nothing more.
            req.params = dataclasses.replace(req.params, max_new_tokens=1)
        self._enqueue(lambda: self.scheduler.add(req), req.arrival)

    def _enqueue(self, add: Callable[[], None], at: float | None = None) -> None:
        # Busy from the moment work arrives, not from when the host gets round to waking the loop:
        # that wake-up latency is the host's, and becomes (bounded) debt instead of simulated time.
        self.clock.start_busy(at)
        add()
        self._returning = max(0, self._returning - 1)
        self._arrived.set()
        self._wake.set()

    async def _receive_kv(self, req: SimRequest) -> None:
        """Decode side of P/D: wait for the prefill's KV, let the transfer pass, then decode."""
        assert req.bootstrap is not None
        self.transfers_in_flight += 1
        asked = self.now()
        try:
            handoff = await fetch_handoff(req.bootstrap, self.args.disaggregation_bootstrap_port)
            bootstrap_s = self.now() - asked
            seconds = self.link.seconds(handoff.kv_bytes)
            await asyncio.sleep(seconds / self.time_scale)
        except BootstrapFailed as exc:
            self.metrics.kv_failed("bootstrap")
            self.scheduler.abort(req, f"KV bootstrap failed: {exc}")
            return
        finally:
            self.transfers_in_flight -= 1
        self.metrics.observe_kv_transfer(seconds, handoff.kv_bytes, bootstrap_s)
        if req.finished is not None:
            return  # the client went away during the transfer
        req.cached_tokens = handoff.cached_tokens
        self._enqueue(lambda: self.scheduler.add_transferred(req))

    def _publish_kv(self, req: SimRequest) -> None:
        """Prefill side of P/D: the prompt's KV is ready for the decode engine to take."""
        req.kv_published = True
        assert req.bootstrap is not None
        self.kv_registry.publish(
            KvHandoff(
                room=req.bootstrap.room,
                prompt_tokens=len(req.input_ids),
                cached_tokens=req.cached_tokens or 0,
                kv_bytes=len(req.input_ids) * self.roofline.kv_bytes_per_token,
            )
        )

    def abort(self, req: SimRequest) -> None:
        self.scheduler.abort(req, "client disconnected")

    def record_finished(self, req: SimRequest) -> None:
        """Request-level metrics, once the caller has seen the last update."""
        aborted = req.finished is None or req.finished.kind == "abort"
        end = req.last_token_at or self.now()
        first = req.first_token_at or end
        self.metrics.observe_finished(
            FinishedRequest(
                streaming=req.stream,
                prompt_tokens=req.prompt_tokens,
                completion_tokens=req.completion_tokens,
                cached_tokens=req.cached_tokens or 0,
                cached_host=req.cached_host,
                cached_storage=req.cached_storage,
                queue_time=self._queue_time(req),
                ttft=first - req.arrival,
                e2e=end - req.arrival,
                aborted=aborted,
            )
        )
        self.metrics.add_spec_verify_calls(req.spec_verify_ct)

    @staticmethod
    def _queue_time(req: SimRequest) -> float:
        """SGLang's queue time: arrival to the first forward batch (a P/D decode engine's
        request, which has none, to joining the running batch)."""
        entered = req.forward_entry_at or req.admitted_at or req.arrival
        return entered - req.arrival

    # ---- the step loop -----------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            if self._returning:
                await self._await_returning()
            if not self.scheduler.has_work():
                self.clock.go_idle()
                self._wake.clear()
                await self._wake.wait()
                if self.arrival_wait_s:
                    # Requests sent together after an idle spell (clients starting at once) start
                    # together, at the first one's simulated time, however the host spaced them.
                    self._returning = max(self._returning, _UNTIL_QUIET)
                continue
            self.clock.start_busy()
            if self.scheduler.transferred:
                self.scheduler.admit_transferred(self.now())
                if not self.scheduler.has_work():
                    continue  # what arrived was aborted, or finished with its first token
            self.scheduler.now = self.now()
            step = self.scheduler.plan()
            if step.work.empty:
                due = self.scheduler.prefetch_due
                if due is not None:  # only requests waiting on storage reads: time passes
                    await self.clock.run_step(due - self.scheduler.now)
                    continue
                self.scheduler.unstick()
                continue
            # An injected slowdown (--sim-slowdown) stands for a degraded GPU: every step longer.
            seconds = self._step_seconds(step) * self.args.sim.slowdown
            for req, _ in step.prefill:
                if req.forward_entry_at is None:
                    req.forward_entry_at = self.scheduler.now
            await self.clock.run_step(seconds)
            self._commit(step, seconds)

    def _step_seconds(self, step: Step) -> float:
        """The roofline's compute time, plus the HiCache traffic since the last step."""
        adapters = self._lora_seconds(step)
        compute = self.roofline.step_seconds(step.work) + adapters
        if self.hicache is None:
            return compute
        return tier_step_seconds(compute, self.hicache.take_traffic(), self.tier_links)

    def _lora_seconds(self, step: Step) -> float:
        """The step's adapters take GPU pool slots; those copied in from host memory lengthen
        it (one direction of the host link). Counts the distinct adapters for the roofline."""
        if self.lora is None:
            return 0.0
        names = {req.adapter for req, _ in (*step.prefill, *step.decode)}
        step.work.lora_adapters = len(names - {None})
        copied = self.lora.prepare(names)
        return copied / (self.gpu.host_link_gbs * 1e9)

    async def _await_returning(self) -> None:
        """Fast clock: hold simulated time while clients whose requests finished come back (or,
        after an idle spell, while requests keep arriving).

        Arrivals meanwhile are stamped with the held time, so a closed-loop client's next request
        lands at the same simulated instant, and joins the same batch, on an idle or a loaded host.
        """
        while self._returning:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), self.arrival_wait_s)
            except TimeoutError:
                break
        self._returning = 0

    def _commit(self, step: Step, seconds: float) -> None:
        now = self.now()
        newly_admitted = [r for r, _ in step.prefill if r.admitted_at is None]
        previous = [(r, tokens, r.last_token_at) for r, tokens in step.decode]
        self.scheduler.commit(step, now)
        for req, _ in step.prefill:
            ready = req.first_token_at is not None and not req.kv_published
            if req.bootstrap is not None and ready:
                self._publish_kv(req)
        for _, tokens, last in previous:
            if last is not None:
                self.metrics.observe_token_gap((now - last) / tokens)
        for req in newly_admitted:
            self.metrics.observe_queue_time(self._queue_time(req))
        decoded = sum(tokens for _, tokens in step.decode)
        for req, _ in step.decode:
            if self.scheduler.config.spec_steps:
                req.spec_verify_ct += 1
        self._note_step(now, step.work, decoded, seconds)
        if self.arrival_wait_s:
            done = {r.rid for r, _ in (*step.prefill, *step.decode) if r.finished is not None}
            self._returning += len(done)

    def _note_step(self, now: float, work: StepWork, decoded: int, seconds: float) -> None:
        self._window.append((now, decoded, seconds))
        while self._window and self._window[0][0] < now - THROUGHPUT_WINDOW_S:
            self._window.popleft()
        self.metrics.add_realtime_tokens("prefill_compute", work.prefill_tokens)
        self.metrics.add_realtime_tokens("decode", decoded)

    # ---- observable state --------------------------------------------------------------------
    def gen_throughput(self) -> float:
        tokens = sum(t for _, t, _ in self._window)
        return tokens / THROUGHPUT_WINDOW_S

    def utilization(self) -> float:
        return min(1.0, sum(s for _, _, s in self._window) / THROUGHPUT_WINDOW_S)

    def spec_accept_length(self) -> float:
        stats = self.scheduler.stats
        if not stats.spec_verify_calls_total:
            return 0.0
        return stats.spec_accepted_tokens_total / stats.spec_verify_calls_total

    def spec_accept_rate(self, length: float | None = None) -> float:
        steps = self.scheduler.config.spec_steps
        length = self.spec_accept_length() if length is None else length
        return max(0.0, (length - 1) / steps) if steps and length else 0.0

    def spec_interval_accept_length(self) -> float:
        """Mean accept length over the verify steps since the last call, as SGLang's gauge.

        SGLang sets ``spec_accept_length`` from the decode batches of one logging interval and
        then resets its counters; here an interval ends at each scrape. With no verify step in
        the interval the gauge keeps its last value.
        """
        stats = self.scheduler.stats
        accepted, calls = stats.spec_accepted_tokens_total, stats.spec_verify_calls_total
        if calls > self._spec_mark[1]:
            self._spec_interval_length = (accepted - self._spec_mark[0]) / (
                calls - self._spec_mark[1]
            )
            self._spec_mark = (accepted, calls)
        return self._spec_interval_length

    def token_usage(self) -> float:
        return self.pool.used / self.pool.capacity

    def loads(self, include: set[str] | None) -> dict[str, Any]:
        """One DP rank's entry of ``/v1/loads`` (SGLang's ``GetLoadsReqOutput.to_dict``)."""
        sched = self.scheduler
        waiting_tokens = sum(len(r.fill_ids) - r.prefilled for r in sched.waiting)
        entry: dict[str, Any] = {
            "dp_rank": 0,
            "timestamp": time.time(),
            "num_running_reqs": sched.num_running,
            "num_waiting_reqs": len(sched.waiting),
            "num_used_tokens": self.pool.used,
            "num_total_tokens": self.pool.used + waiting_tokens,
            "max_total_num_tokens": self.pool.capacity,
            "token_usage": round(self.token_usage(), 4),
            "gen_throughput": round(self.gen_throughput(), 3),
            "cache_hit_rate": round(sched.stats.last_cache_hit_rate, 4),
            "utilization": round(self.utilization(), 4),
            "max_running_requests": sched.config.max_running_requests,
        }
        for name, section in self._load_sections().items():
            if include is None or "all" in include or name in include:
                entry[section[0]] = section[1]
        return entry

    def _load_sections(self) -> dict[str, tuple[str, dict[str, Any]]]:
        sched = self.scheduler
        return {
            "memory": (
                "memory",
                {
                    "weight_gb": round(self.plan.weight_gb, 3),
                    "kv_cache_gb": round(self.plan.kv_cache_gb, 3),
                    "graph_gb": 0.0,
                    "token_capacity": self.pool.capacity,
                    **({"hicache": self._hicache_load()} if self.hicache else {}),
                },
            ),
            "spec": (
                "speculative",
                {
                    "accept_length": self.spec_accept_length(),
                    "accept_rate": self.spec_accept_rate(),
                },
            ),
            "disagg": ("disaggregation", self._disaggregation_load()),
            **({"lora": ("lora", self._lora_load())} if self.lora is not None else {}),
            "queues": (
                "queues",
                {
                    "waiting": len(sched.waiting),
                    "grammar": 0,
                    "paused": 0,
                    "retracted": sum(1 for r in sched.waiting if r.retractions),
                },
            ),
        }

    def _lora_load(self) -> dict[str, Any]:
        """SGLang's ``lora`` section of ``/v1/loads`` (``LoRAMetrics``): the pool's slots."""
        assert self.lora is not None
        total = self.lora.config.max_loras_per_batch
        used = self.lora.slots_used(r.adapter for r in self.scheduler.running)
        return {"slots_used": used, "slots_total": total, "utilization": used / total}

    def _hicache_load(self) -> dict[str, Any]:
        """The tiers' state and the prefix tokens each tier served since start: part of the
        ``memory`` section of ``/v1/loads`` (SGLang's include names stay as they are); /metrics
        carries the same under SGLang's metric names."""
        hicache, stats = self.hicache, self.scheduler.stats
        host_hits = hicache.stats.host_hit_tokens if hicache else 0
        storage_hits = hicache.stats.storage_hit_tokens if hicache else 0
        return {
            "enabled": hicache is not None,
            "host_used_tokens": hicache.host.used if hicache else 0,
            "host_total_tokens": hicache.host.capacity if hicache else 0,
            "storage_used_tokens": hicache.storage.used if hicache and hicache.storage else 0,
            "cached_tokens": {
                "device": stats.prefill_cached_tokens_total - host_hits - storage_hits,
                "host": host_hits,
                "storage": storage_hits,
            },
            "prefill_tokens": stats.prefill_cached_tokens_total
            + stats.prefill_computed_tokens_total,
        }

    def _disaggregation_load(self) -> dict[str, Any]:
        """SGLang's ``disaggregation`` section of ``/v1/loads`` (queue sizes by PD role)."""
        mode = self.args.disaggregation_mode
        prefill, decode = mode == "prefill", mode == "decode"
        return {
            "mode": mode,
            "prefill_prealloc_queue_reqs": 0,
            "prefill_inflight_queue_reqs": self.kv_registry.pending if prefill else 0,
            "decode_prealloc_queue_reqs": len(self.scheduler.transferred) if decode else 0,
            "decode_transfer_queue_reqs": self.transfers_in_flight if decode else 0,
            "decode_retracted_queue_reqs": 0,
        }

    def loads_document(self, include: set[str] | None) -> dict[str, Any]:
        return {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": SGLANG_VERSION,
            "accelerator": f"{self.gpu.name} (simulated)",
            "num_accelerators": self.args.tp_size * self.args.pp_size,
            "loads": [self.loads(include)],
        }

    def refresh_metrics(self) -> None:
        """Bring the scheduler gauges up to date before a scrape."""
        sched, pool, set_gauge = self.scheduler, self.pool, self.metrics.set_gauge
        set_gauge("num_running_reqs", sched.num_running)
        set_gauge("num_queue_reqs", len(sched.waiting))
        set_gauge("gen_throughput", self.gen_throughput())
        set_gauge("cache_hit_rate", sched.stats.last_cache_hit_rate)
        set_gauge("token_usage", self.token_usage())
        set_gauge("num_used_tokens", pool.used)
        set_gauge("kv_used_tokens", pool.used)
        set_gauge("kv_available_tokens", pool.free)
        set_gauge("kv_evictable_tokens", pool.cache.evictable_size)
        set_gauge("utilization", self.utilization())
        set_gauge("new_token_ratio", sched.new_token_ratio)
        set_gauge(
            "decode_sum_seq_lens", sum(len(r.input_ids) + len(r.output_ids) for r in sched.running)
        )
        interval_length = self.spec_interval_accept_length()
        set_gauge("spec_accept_length", interval_length)
        set_gauge("spec_accept_rate", self.spec_accept_rate(interval_length))
        set_gauge("num_retracted_reqs", sum(1 for r in sched.waiting if r.retractions))
        disagg = self._disaggregation_load()
        for name in (
            "prefill_inflight_queue_reqs",
            "decode_prealloc_queue_reqs",
            "decode_transfer_queue_reqs",
        ):
            set_gauge(f"num_{name}", disagg[name])
        set_gauge("num_prefill_bootstrap_queue_reqs", 0)
        stats = sched.stats
        self.metrics.set_counter_total("num_retracted_requests", stats.retracted_requests_total)
        self.metrics.set_counter_total(
            "num_retracted_input_tokens", stats.retracted_input_tokens_total
        )
        self.metrics.set_counter_total(
            "num_retracted_output_tokens", stats.retracted_output_tokens_total
        )
        self.metrics.set_counter_total("evicted_tokens", pool.cache.evicted_tokens_total)
        if self.hicache is not None:
            self._refresh_hicache_metrics(self.hicache)
        if self.lora is not None:
            for name, value in self._lora_load().items():
                set_gauge(f"lora_pool_{name}", value)

    def _refresh_hicache_metrics(self, hicache: HiCache) -> None:
        set_gauge, stats = self.metrics.set_gauge, hicache.stats
        set_gauge("hicache_host_used_tokens", hicache.host.used)
        set_gauge("hicache_host_total_tokens", hicache.host.capacity)
        self.metrics.set_pool_total("load_back_tokens", "host", stats.load_back_tokens)
        self.metrics.set_pool_total("hicache_backup_tokens", "host", stats.backup_tokens)
        if hicache.storage is not None:
            self.metrics.set_counter_total("prefetched_tokens", stats.prefetched_tokens)
            self.metrics.set_counter_total("storage_prefetch_hit_tokens", stats.storage_hit_tokens)
            self.metrics.set_counter_total("backuped_tokens", stats.storage_backup_tokens)

    def _report_static_metrics(self) -> None:
        set_gauge, config = self.metrics.set_gauge, self.scheduler.config
        set_gauge("max_total_num_tokens", self.plan.max_total_num_tokens)
        set_gauge("weight_memory_usage_gb", self.plan.weight_gb)
        set_gauge("kv_cache_memory_usage_gb", self.plan.kv_cache_gb)
        set_gauge("context_len", self.plan.context_length)
        set_gauge("page_size", self.plan.page_size)
        set_gauge("num_pages", self.plan.max_total_num_tokens // self.plan.page_size)
        set_gauge("is_cuda_graph", 1)
        set_gauge("spec_num_steps", config.spec_steps)
        set_gauge("spec_num_draft_tokens", config.spec_draft_tokens)
        for name in ("num_grammar_queue_reqs", "num_paused_reqs"):
            set_gauge(name, 0)
        self.refresh_metrics()


def hicache_of(args: EngineArgs, plan: MemoryPlan) -> HiCache | None:
    """The engine's HiCache tiers, or None without ``--enable-hierarchical-cache``."""
    if not plan.host_tokens:
        return None
    return HiCache(
        HiCacheConfig(
            host_tokens=plan.host_tokens,
            write_policy=args.hicache_write_policy,
            storage=args.hicache_storage_backend is not None,
            kv_bytes_per_token=plan.kv_bytes_per_token,
            page_size=plan.page_size,
            storage_bytes_per_token=plan.kv_bytes_per_token * max(1, args.tp_size),
        )
    )


def adapter_pool_of(args: EngineArgs, model: ModelShape) -> AdapterPool | None:
    """The engine's LoRA adapters, the ``--lora-paths`` ones registered (their read from the
    source is part of the start: ``runtime.sim.server``), or None without LoRA."""
    config = lora_config(args, model)
    if config is None:
        return None
    pool = AdapterPool(config, model, args.tp_size * args.pp_size)
    for name, path, pinned in parse_lora_paths(args.lora_paths or []):
        pool.register(name, path, pinned)
    return pool


def scheduler_config(
    args: EngineArgs, plan: MemoryPlan, spec: SpecConfig | None
) -> SchedulerConfig:
    # The scheduler samples accept lengths from a chain; its rate keeps the physics' mean length.
    steps = spec.shape.num_steps if spec else 0
    return SchedulerConfig(
        max_running_requests=plan.max_running_requests,
        max_prefill_tokens=args.max_prefill_tokens,
        chunked_prefill_size=plan.chunked_prefill_size,
        page_size=plan.page_size,
        schedule_policy=args.schedule_policy,
        conservativeness=args.schedule_conservativeness,
        spec_steps=steps,
        spec_draft_tokens=spec.shape.draft_tokens if spec else 0,
        spec_accept_rate=chain_rate(spec.accept_length, steps) if spec else 0.0,
        stream_interval=max(1, args.stream_interval),
    )
