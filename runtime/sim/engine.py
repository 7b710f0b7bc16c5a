"""The simulated engine: the scheduler driven in (scaled) real time, plus its observable state.

``run`` is the step loop: plan a step, sleep its roofline duration divided by ``--time-scale``,
commit it. Clock readings (``now``) are simulated seconds, so latencies in responses and metrics
read as if the engine ran on the configured GPU. When the host cannot keep up (many engines on few
cores at a large time scale), the simulated clock stays tied to real time and the engine simply
runs slower.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from datetime import UTC, datetime
from typing import Any

from runtime.sim.args import EngineArgs
from runtime.sim.hardware import GpuShape, ModelShape
from runtime.sim.kvpool import KvPool
from runtime.sim.memory import MemoryPlan, output_noise
from runtime.sim.metrics import EngineMetrics, FinishedRequest
from runtime.sim.radix import RadixCache
from runtime.sim.request import GenerationParams, SimRequest
from runtime.sim.roofline import Roofline, StepWork
from runtime.sim.sampling import TokenSource, request_key
from runtime.sim.scheduler import Scheduler, SchedulerConfig, Step
from runtime.sim.tokenizer import Tokenizer

SGLANG_VERSION = "0.5.23"
THROUGHPUT_WINDOW_S = 5.0  # simulated seconds behind gen_throughput and utilization


class Engine:
    def __init__(
        self, args: EngineArgs, gpu: GpuShape, model: ModelShape, plan: MemoryPlan
    ) -> None:
        self.args, self.gpu, self.model, self.plan = args, gpu, model, plan
        self.time_scale = args.sim.time_scale
        self.tokenizer = Tokenizer(max(model.vocab_size, 1024))
        cache = RadixCache(plan.page_size, disabled=args.disable_radix_cache)
        self.pool = KvPool(plan.max_total_num_tokens, cache)
        self.scheduler = Scheduler(_scheduler_config(args, plan), self.pool, self.tokenizer)
        self.roofline = Roofline(args, gpu, model)
        engine_type = "unified" if args.disaggregation_mode == "null" else args.disaggregation_mode
        self.metrics = EngineMetrics(args.served_model_name, engine_type, args.extra_metric_labels)
        self.noise = output_noise(args.quantization, args.kv_cache_dtype)
        self.default_seed = args.random_seed if args.random_seed is not None else 0
        self._wake = asyncio.Event()
        self._window: deque[tuple[float, int, float]] = deque()  # (end, tokens, busy seconds)
        self._report_static_metrics()

    # ---- clock and requests ------------------------------------------------------------------
    def now(self) -> float:
        return time.monotonic() * self.time_scale

    def new_request(
        self,
        input_ids: list[int],
        params: GenerationParams,
        *,
        stream: bool,
        seed: int | None = None,
        rid: str | None = None,
    ) -> SimRequest:
        key = request_key(self.default_seed if seed is None else seed, input_ids)
        source = TokenSource(key, self.args.sim.output_len_mean, self.noise)
        return SimRequest(
            rid=rid or uuid.uuid4().hex,
            input_ids=list(input_ids),
            params=params,
            source=source,
            stream=stream,
            arrival=self.now(),
        )

    def submit(self, req: SimRequest) -> None:
        self.scheduler.add(req)
        self._wake.set()

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
                queue_time=(req.admitted_at or req.arrival) - req.arrival,
                ttft=first - req.arrival,
                e2e=end - req.arrival,
                aborted=aborted,
            )
        )
        self.metrics.add_spec_verify_calls(req.spec_verify_ct)

    # ---- the step loop -----------------------------------------------------------------------
    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            if not self.scheduler.has_work():
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()
                continue
            step = self.scheduler.plan()
            if step.work.empty:
                self.scheduler.unstick()
                continue
            seconds = self.roofline.step_seconds(step.work)
            # Sleep to the step's end; never build up a debt when the host falls behind.
            deadline = max(deadline, loop.time()) + seconds / self.time_scale
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            self._commit(step, seconds)

    def _commit(self, step: Step, seconds: float) -> None:
        now = self.now()
        newly_admitted = [r for r, _ in step.prefill if r.admitted_at is None]
        previous = [(r, tokens, r.last_token_at) for r, tokens in step.decode]
        self.scheduler.commit(step, now)
        for _, tokens, last in previous:
            if last is not None:
                self.metrics.observe_token_gap((now - last) / tokens)
        for req in newly_admitted:
            self.metrics.observe_queue_time((req.admitted_at or now) - req.arrival)
        decoded = sum(tokens for _, tokens in step.decode)
        for req, _ in step.decode:
            if self.scheduler.config.spec_steps:
                req.spec_verify_ct += 1
        self._note_step(now, step.work, decoded, seconds)

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

    def spec_accept_rate(self) -> float:
        steps = self.scheduler.config.spec_steps
        length = self.spec_accept_length()
        return max(0.0, (length - 1) / steps) if steps and length else 0.0

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
                },
            ),
            "spec": (
                "speculative",
                {
                    "accept_length": self.spec_accept_length(),
                    "accept_rate": self.spec_accept_rate(),
                },
            ),
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
        set_gauge("spec_accept_length", self.spec_accept_length())
        set_gauge("spec_accept_rate", self.spec_accept_rate())
        set_gauge("num_retracted_reqs", sum(1 for r in sched.waiting if r.retractions))
        stats = sched.stats
        self.metrics.set_counter_total("num_retracted_requests", stats.retracted_requests_total)
        self.metrics.set_counter_total(
            "num_retracted_input_tokens", stats.retracted_input_tokens_total
        )
        self.metrics.set_counter_total(
            "num_retracted_output_tokens", stats.retracted_output_tokens_total
        )
        self.metrics.set_counter_total("evicted_tokens", pool.cache.evicted_tokens_total)

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


def _scheduler_config(args: EngineArgs, plan: MemoryPlan) -> SchedulerConfig:
    steps, draft = _speculative_shape(args)
    return SchedulerConfig(
        max_running_requests=plan.max_running_requests,
        max_prefill_tokens=args.max_prefill_tokens,
        chunked_prefill_size=plan.chunked_prefill_size,
        page_size=plan.page_size,
        schedule_policy=args.schedule_policy,
        conservativeness=args.schedule_conservativeness,
        spec_steps=steps,
        spec_draft_tokens=draft,
        spec_accept_rate=args.sim.spec_accept_rate,
        stream_interval=max(1, args.stream_interval),
    )


def _speculative_shape(args: EngineArgs) -> tuple[int, int]:
    """(num_steps, num_draft_tokens) after SGLang's defaulting: (3, 1, 4) unless given."""
    if args.speculative_algorithm is None:
        return 0, 0
    steps = args.speculative_num_steps or 3
    topk = args.speculative_eagle_topk or 1
    draft = steps + 1 if topk == 1 else (args.speculative_num_draft_tokens or steps + 1)
    return steps, draft
