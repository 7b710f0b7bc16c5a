"""Continuous batching: which requests run in the next forward pass, and what it produces.

Modelled on SGLang's scheduler. Each step is either a prefill (extend) batch, when waiting requests
can be admitted, or a decode batch of every running request. Admission stops at
``--max-running-requests``, at the prefill token budget (``--max-prefill-tokens``), and when the
KV pool cannot hold the request plus a reserve for the decoding ones; a prompt longer than
``--chunked-prefill-size`` is prefilled in chunks over several steps. A decode step gives each
running request one token, or an accept length's worth under speculation; when the pool runs dry
the request with the least progress is retracted to the front of the queue and later recomputed.
The scheduler is synchronous and clock-free: ``plan`` picks a step, the caller waits for its
simulated duration, ``commit`` applies it. On a P/D decode engine, requests whose KV arrived from a
prefill engine join the running batch through ``add_transferred``/``admit_transferred`` without any
prefill step (SGLang's decode prealloc queue).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from runtime.sim.hicache import HiCache, TierHit
from runtime.sim.kvpool import KvPool
from runtime.sim.lora import AdapterPool
from runtime.sim.radix import PrefixMatch
from runtime.sim.request import FinishReason, GenerationParams, SimRequest, Update
from runtime.sim.roofline import StepWork
from runtime.sim.tokenizer import EOS_ID, Tokenizer

RESERVE_CAP = 4096  # per-request cap of the decode reserve, as SGLang clips it
LPM_QUEUE_LIMIT = 128  # SGLang falls back to FCFS above this queue length


@dataclass(frozen=True)
class SchedulerConfig:
    max_running_requests: int
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int = 8192  # <= 0: no chunking
    page_size: int = 1
    schedule_policy: str = "fcfs"
    conservativeness: float = 1.0
    spec_steps: int = 0  # 0: no speculative decoding
    spec_draft_tokens: int = 0
    spec_accept_rate: float = 0.7
    stream_interval: int = 1

    @property
    def init_new_token_ratio(self) -> float:
        return min(1.0, 0.7 * self.conservativeness)


@dataclass
class SchedulerStats:
    retracted_requests_total: int = 0
    retracted_input_tokens_total: int = 0
    retracted_output_tokens_total: int = 0
    prefill_computed_tokens_total: int = 0
    prefill_cached_tokens_total: int = 0
    decode_tokens_total: int = 0
    spec_verify_calls_total: int = 0
    spec_accepted_tokens_total: int = 0
    last_cache_hit_rate: float = 0.0


@dataclass
class Step:
    prefill: list[tuple[SimRequest, int]] = field(default_factory=list)
    decode: list[tuple[SimRequest, int]] = field(default_factory=list)
    work: StepWork = field(default_factory=StepWork)


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        pool: KvPool,
        tokenizer: Tokenizer,
        hicache: HiCache | None = None,
        lora: AdapterPool | None = None,
    ) -> None:
        self.config = config
        self.lora = lora
        self.pool = pool
        self.cache = pool.cache
        self.hicache = hicache
        if hicache is not None:
            self.cache.on_evict = hicache.evicted
        self.tokenizer = tokenizer
        self.waiting: deque[SimRequest] = deque()
        self.prefilling: list[SimRequest] = []
        self.running: list[SimRequest] = []
        self.transferred: deque[SimRequest] = deque()  # KV received, waiting for pool space
        self.now = 0.0  # simulated time, set by the engine before each plan (storage prefetch)
        self.stats = SchedulerStats()
        self.new_token_ratio = config.init_new_token_ratio
        self._step_cached = 0

    # ---- queue -------------------------------------------------------------------------------
    def add(self, req: SimRequest) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.prefilling or self.running or self.transferred)

    def add_transferred(self, req: SimRequest) -> None:
        """A request whose prompt KV (and first token) a prefill engine computed."""
        self.transferred.append(req)

    def admit_transferred(self, now: float) -> int:
        """Move received requests into the running batch: their prompt KV takes pool slots, no
        compute; the first token (the prefill engine's) is emitted now. Returns how many."""
        admitted = 0
        while self.transferred:
            req = self.transferred[0]
            if req.finished is not None:
                self.transferred.popleft()
                continue
            if self.num_running >= self.config.max_running_requests:
                break
            prompt = len(req.fill_ids)
            if not self._fits(prompt + 1 + self._reserve(req)) or not self._alloc(req, prompt):
                if self.running or self.prefilling:
                    break  # wait for running requests to free memory
                self.transferred.popleft()
                self._finish(req, FinishReason("abort", message="KV does not fit"), cache=False)
                continue
            self.transferred.popleft()
            req.prefilled = prompt
            req.admitted_at = now
            self.running.append(req)
            self._alloc(req, 1)
            self._generate(req, 1, now)
            admitted += 1
        return admitted

    @property
    def num_running(self) -> int:
        return len(self.running) + len(self.prefilling)

    def abort(self, req: SimRequest, message: str = "aborted") -> None:
        if req.finished is None:
            self._finish(req, FinishReason("abort", message=message), cache=False)

    def unstick(self) -> None:
        """Nothing can run although requests wait: refuse the first (it can never fit)."""
        stuck = self.prefilling[0] if self.prefilling else self.waiting[0]
        self.abort(stuck, "the request does not fit in the KV cache")

    def flush_cache(self) -> bool:
        """Empty the prefix cache; refused (False) while requests are in flight, as in SGLang."""
        if self.has_work():
            return False
        self.cache.reset()
        if self.hicache is not None:
            self.hicache.reset()
        return True

    # ---- planning ----------------------------------------------------------------------------
    def plan(self) -> Step:
        step = Step()
        self._step_cached = 0
        step.prefill = self._admit()
        if step.prefill:
            self._account_prefill(step)
            return step
        step.decode = self._plan_decode()
        self._account_decode(step)
        return step

    def _admit(self) -> list[tuple[SimRequest, int]]:
        chunks: list[tuple[SimRequest, int]] = []
        budget = _Budget(self.config)
        for req in list(self.prefilling):
            take = budget.take(req.fill_ids, req.prefilled, first=not chunks)
            if take <= 0 or not self._alloc(req, take):
                return chunks
            chunks.append((req, take))
            if req.prefilled + take < len(req.fill_ids):
                return chunks  # still chunking: nothing else joins this step
        for req in self._admission_order():
            if self.num_running >= self.config.max_running_requests:
                break
            if self._prefetching(req):
                continue  # its pages are still coming from storage; the others go ahead
            if not self._adapter_fits(req, chunks):
                continue  # its adapter would pass max_loras_per_batch: it waits, others go
            take = self._admit_one(req, budget, first=not chunks)
            if take <= 0:
                break
            chunks.append((req, take))
            if req.prefilled + take < len(req.fill_ids):
                break
        return chunks

    def _admit_one(self, req: SimRequest, budget: _Budget, first: bool) -> int:
        match = self.cache.match_prefix(req.fill_ids[:-1])
        extend = len(req.fill_ids) - match.length
        if not self._fits(extend + self._reserve(req)):
            return 0
        match, hit = self._load_back(req.fill_ids[:-1], match)
        take = budget.take(req.fill_ids, match.length, first=first)
        if take <= 0:
            return 0
        self.cache.lock(match.node)
        req.node, req.locked_len, req.prefilled = match.node, match.length, match.length
        if not self._alloc(req, take):
            self.cache.unlock(match.node)
            req.node, req.locked_len, req.prefilled = None, 0, 0
            return 0
        self.waiting.remove(req)
        self.prefilling.append(req)
        if req.cached_tokens is None:
            req.cached_tokens = match.length
            req.cached_host, req.cached_storage = hit.host, hit.storage
            if req.prefetched_storage and self.hicache is not None:
                # Came from storage through the host tier: a storage hit, counted as one.
                moved = min(req.prefetched_storage, req.cached_host)
                req.cached_host -= moved
                req.cached_storage += moved
                self.hicache.stats.host_hit_tokens -= moved
        self.stats.prefill_cached_tokens_total += match.length
        self._step_cached += match.length
        return take

    def _adapter_fits(self, req: SimRequest, chunks: list[tuple[SimRequest, int]]) -> bool:
        """Whether the batch's distinct LoRA adapters, ``req``'s included, fit the GPU pool."""
        if self.lora is None:
            return True
        names = {r.adapter for r in (*self.running, *self.prefilling)}
        names |= {r.adapter for r, _ in chunks} | {req.adapter}
        return self.lora.fits(names)

    def uses_adapter(self, name: str) -> bool:
        """Whether any request in the engine runs with the LoRA adapter ``name``."""
        queues = (self.waiting, self.prefilling, self.running, self.transferred)
        return any(r.adapter == name and r.finished is None for q in queues for r in q)

    def _prefetching(self, req: SimRequest) -> bool:
        """HiCache's storage prefetch: a request whose prefix storage holds beyond the GPU and
        host waits in the queue while its pages are read into host memory (one read at a time
        over the storage link, beside the GPU's work); then it is admitted as a host hit."""
        hicache = self.hicache
        if hicache is None or hicache.storage is None:
            return False
        if req.prefetch_until is None:
            ids = req.fill_ids[:-1]
            hit = hicache.lookup(ids, self.cache.match_prefix(ids).length)
            if not hit.storage:
                return False
            req.prefetch_until = hicache.prefetch(ids, hit, self.now)
            req.prefetched_storage = hit.storage
        return self.now < req.prefetch_until

    @property
    def prefetch_due(self) -> float | None:
        """When the earliest prefetch in the queue completes (None: no request waits on one)."""
        pending = [
            r.prefetch_until for r in self.waiting
            if r.prefetch_until is not None and r.prefetch_until > self.now
        ]  # fmt: skip
        return min(pending) if pending else None

    def _load_back(self, ids: list[int], match: PrefixMatch) -> tuple[PrefixMatch, TierHit]:
        """HiCache: bring what the host (or storage) tier holds of ``ids`` beyond the GPU's
        ``match`` into the GPU's cache, if the pool has room for it; the longer match after."""
        none = TierHit()
        if self.hicache is None:
            return match, none
        hit = self.hicache.lookup(ids, match.length)
        tokens = hit.host + hit.storage
        if not tokens:
            return match, none
        # The matched prefix is held while room is made, so eviction cannot take it.
        self.cache.lock(match.node)
        room = self.pool.try_alloc(tokens)
        if room:
            self.pool.release(tokens)  # the slots go to the cache, not to the request
            self.cache.insert(ids[: match.length + tokens])
        self.cache.unlock(match.node)
        if not room:
            return match, none
        self.hicache.loaded(ids[: match.length + tokens], hit)
        return self.cache.match_prefix(ids[: match.length + tokens]), hit

    def _admission_order(self) -> list[SimRequest]:
        queue = list(self.waiting)
        if self.config.schedule_policy == "lpm" and len(queue) <= LPM_QUEUE_LIMIT:
            queue.sort(key=lambda r: -self.cache.match_prefix(r.fill_ids[:-1]).length)
        return queue

    def _reserve(self, req: SimRequest) -> int:
        return int(min(req.remaining_tokens, RESERVE_CAP) * self.new_token_ratio)

    def _fits(self, tokens: int) -> bool:
        """Would a new request leave room for the running ones to keep decoding?"""
        if not self.running and not self.prefilling:
            return True  # an idle engine always tries; allocation decides
        reserved = sum(self._reserve(r) for r in self.running)
        return tokens <= self.pool.available - reserved

    def _alloc(self, req: SimRequest, tokens: int) -> bool:
        if not self.pool.try_alloc(tokens):
            return False
        req.private_tokens += tokens
        return True

    def _plan_decode(self) -> list[tuple[SimRequest, int]]:
        wanted = {req: self._tokens_this_step(req) for req in self.running}
        while self.pool.available < sum(wanted.values()) and len(self.running) > 1:
            victim = max(self.running, key=lambda r: (-len(r.output_ids), len(r.input_ids)))
            wanted.pop(victim)
            self._retract(victim)
        batch = []
        for req, tokens in wanted.items():
            if self._alloc(req, tokens):
                batch.append((req, tokens))
            else:
                self._finish(
                    req, FinishReason("abort", message="out of KV cache memory"), cache=False
                )
        self.new_token_ratio = max(0.1, self.new_token_ratio - 0.001)
        return batch

    def _tokens_this_step(self, req: SimRequest) -> int:
        if not self.config.spec_steps:
            return 1
        accepted = req.source.accept_length(self.config.spec_steps, self.config.spec_accept_rate)
        return max(1, min(accepted, req.remaining_tokens))

    def _retract(self, req: SimRequest) -> None:
        self._release(req)
        self.running.remove(req)
        req.fill_ids = req.keyed(req.input_ids + req.output_ids)
        req.prefilled = 0
        req.retractions += 1
        self.waiting.appendleft(req)
        self.stats.retracted_requests_total += 1
        self.stats.retracted_input_tokens_total += len(req.input_ids)
        self.stats.retracted_output_tokens_total += len(req.output_ids)
        self.new_token_ratio = self.config.init_new_token_ratio

    def _account_prefill(self, step: Step) -> None:
        work = step.work
        for req, take in step.prefill:
            work.prefill_tokens += take
            work.prefill_pairs += take * (req.prefilled + take / 2)
        total = work.prefill_tokens + self._step_cached
        self.stats.last_cache_hit_rate = self._step_cached / total if total else 0.0
        self.stats.prefill_computed_tokens_total += work.prefill_tokens

    def _account_decode(self, step: Step) -> None:
        work = step.work
        spec = self.config.spec_steps > 0
        for req, _ in step.decode:
            work.decode_seqs += 1
            work.decode_tokens += self.config.spec_draft_tokens if spec else 1
            work.decode_context += len(req.input_ids) + len(req.output_ids)
        if spec and step.decode:
            work.draft_passes = self.config.spec_steps

    # ---- applying a step ---------------------------------------------------------------------
    def commit(self, step: Step, now: float) -> None:
        for req, take in step.prefill:
            if req.finished is not None:
                continue
            req.prefilled += take
            self._cache_prefix(req, req.fill_ids[: req.prefilled])
            if req.admitted_at is None:
                req.admitted_at = now
            if req.prefilled == len(req.fill_ids):
                self.prefilling.remove(req)
                self.running.append(req)
                self._alloc(req, 1)
                self._generate(req, 1, now)
        for req, tokens in step.decode:
            if req.finished is None:
                self._generate(req, tokens, now)
                self._count_decode(tokens)

    def _count_decode(self, tokens: int) -> None:
        self.stats.decode_tokens_total += tokens
        if self.config.spec_steps:
            self.stats.spec_verify_calls_total += 1
            self.stats.spec_accepted_tokens_total += tokens

    def _generate(self, req: SimRequest, count: int, now: float) -> None:
        new: list[int] = []
        for _ in range(count):
            token = self._next_token(req)
            new.append(token)
            if req.finished is not None:
                break
        if req.first_token_at is None:
            req.first_token_at = now
        req.last_token_at = now
        self._emit(req, new)

    def _next_token(self, req: SimRequest) -> int:
        position = len(req.output_ids)
        natural_end = _may_stop(req.params, position) and position + 1 >= req.source.natural_len
        token = req.source.token_at(position, finishing=natural_end)
        req.output_ids.append(token)
        before = len(req.text)
        req.text += self.tokenizer.id_to_piece(token)
        reason = self._stop_reason(req, token, before)
        if reason is not None:
            self._finish(req, reason, cache=True)
        return token

    def _stop_reason(self, req: SimRequest, token: int, before: int) -> FinishReason | None:
        """In SGLang's order (``Req.check_finished``): the length limit first, so a last token
        that is also an end or stop token still reports ``length``; then tokens, then strings."""
        params = req.params
        if len(req.output_ids) >= params.max_new_tokens:
            return FinishReason("length", length=len(req.output_ids))
        if _may_stop(params, len(req.output_ids) - 1) and (
            token == EOS_ID or token in params.stop_token_ids
        ):
            return FinishReason("stop", matched=token)
        for stop in params.stop:
            at = req.text.find(stop, max(0, before - len(stop) + 1))
            if at >= 0:
                req.text = req.text[:at]
                return FinishReason("stop", matched=stop)
        return None

    def _emit(self, req: SimRequest, tokens: list[int]) -> None:
        req.pending_stream_tokens.extend(tokens)
        ready = len(req.pending_stream_tokens) >= self.config.stream_interval
        # The first token always goes out at once, so --stream-interval does not delay TTFT.
        first = len(req.output_ids) == len(req.pending_stream_tokens)
        if ready or first or req.finished is not None:
            req.updates.put_nowait(Update(req.pending_stream_tokens, req.finished))
            req.pending_stream_tokens = []

    # ---- KV bookkeeping ----------------------------------------------------------------------
    def _finish(self, req: SimRequest, reason: FinishReason, cache: bool) -> None:
        req.finished = reason
        if cache and req.node is not None:
            self._cache_prefix(req, req.keyed(req.input_ids + req.output_ids))
        self._release(req)
        for queue in (self.running, self.prefilling):
            if req in queue:
                queue.remove(req)
        if req in self.waiting:
            self.waiting.remove(req)
        if req in self.transferred:
            self.transferred.remove(req)
        if reason.kind == "abort":
            self._emit(req, [])

    def _cache_prefix(self, req: SimRequest, ids: list[int]) -> None:
        """Move computed tokens from the request's private slots into the radix cache."""
        if self.cache.disabled or req.node is None:
            return
        aligned = len(ids) - len(ids) % self.cache.page_size
        if aligned <= req.locked_len:
            return
        moved = min(req.private_tokens, aligned - req.locked_len)
        self.pool.release(moved)
        req.private_tokens -= moved
        known = self.cache.insert(ids[:aligned])
        if self.hicache is not None:
            self.hicache.cached(ids[:aligned], aligned - known, reused=bool(req.cached_tokens))
        if self.pool.free < 0:
            self.cache.evict(-self.pool.free)
        match = self.cache.match_prefix(ids[:aligned])
        self.cache.lock(match.node)
        self.cache.unlock(req.node)
        req.node, req.locked_len = match.node, match.length

    def _release(self, req: SimRequest) -> None:
        self.pool.release(req.private_tokens)
        req.private_tokens = 0
        if req.node is not None:
            self.cache.unlock(req.node)
        req.node, req.locked_len = None, 0


class _Budget:
    """The token budget of one prefill step."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.page = config.page_size
        self.chunking = config.chunked_prefill_size > 0
        self.remaining = config.max_prefill_tokens
        if self.chunking:
            self.remaining = min(self.remaining, config.chunked_prefill_size)

    def take(self, fill_ids: list[int], done: int, first: bool) -> int:
        extend = len(fill_ids) - done
        if extend <= self.remaining:
            granted = extend
        elif self.chunking:
            granted = self.remaining - self.remaining % self.page
        else:
            granted = extend if first else 0
        self.remaining -= granted
        return granted


def _may_stop(params: GenerationParams, position: int) -> bool:
    """Whether the token at output ``position`` may be EOS or a stop token: never under
    ``ignore_eos`` (SGLang then skips its stop-token check), and not before ``min_new_tokens``
    (SGLang masks those tokens' logits until then). Stop strings are not held back by either."""
    return not params.ignore_eos and position >= params.min_new_tokens
