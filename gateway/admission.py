"""Fair admission under overload: a bound on each endpoint's requests in flight, and a fair queue.

Per endpoint, this gateway process lets at most ``limit`` requests be in flight (from admission
to the end of the response, streams included). The limit is the endpoint's capacity: its ready
replicas (a canary's counted too) times the in-flight requests one replica is sized for
(``Endpoint.per_replica``: the revision's ``autoscaling.concurrency_target``, at most its
``batching.max_running_requests`` when that is set; the operator's
``GATEWAY_ADMISSION_PER_REPLICA`` overrides both), divided among ``GATEWAY_REPLICAS`` gateway
processes. Past it, requests wait here rather than in the engine, whose queue is first come,
first served and knows nothing of keys.

Waiting requests are admitted by priority class first (``critical`` before ``standard`` before
``batch``: a waiting request of a higher class always goes first) and, within the class, by
start-time fair queuing across keys: each request gets a start tag ``max(V, the key's last
finish tag)`` and a finish tag ``start + 1 / weight``, and the smallest start tag goes next
(``V`` is the start tag of the last one admitted). A key that floods queues behind its own
earlier requests, so another key's request waits for at most about one admission per other
busy key of its class; keys with weights 3 and 1 share admissions 3 to 1. A request costs 1:
the limit counts requests in flight, and the tokens a request will generate are unknown when it
is admitted.

Waiting for even one admission would still put a flood's service time into a light key's TTFT,
so a key holding less than its fair share of the limit (``limit * weight / the weights of the
keys in flight or waiting``) goes in at once, up to its share, while nobody of a higher class
waits: it borrows a slot beyond the limit, which a key over its share left it no room for. A
borrower takes at most its share (rounded up), so what is in flight beyond the limit is bounded
by what the keys under their share were owed; and a key over its share is admitted only while
fewer than ``limit`` are in flight, so its next requests wait until enough of its requests in
flight have finished to bring the endpoint back under its limit: the borrowed slots come back by
themselves.

Many light keys could still together borrow as much as a flood holds. A hard ceiling bounds the
borrowing: the engines' own capacity when the spec states it (``batching.max_running_requests``
times the ready replicas, this process's share of it), or the limit plus ``headroom`` (a share of
the limit, ``GATEWAY_ADMISSION_HEADROOM``), whichever is larger. The limit is the capacity at the
endpoint's target, usually below what its engines can run at once, so borrowed slots run beside
the flood rather than queueing in the engine. ``headroom`` 0 turns borrowing off: every request
beyond the limit waits its turn in the queue.

When more requests wait than the queue's bound (``queue_factor`` times the limit), one of the
lowest waiting class is refused: the newest request of the key furthest ahead of its share
(largest finish tag), which may be the one arriving; a request that has waited ``wait_seconds``
is refused too. Both answer 429 with Retry-After and an OpenAI-style error naming the reason,
never a timeout.

Fair admission bounds what a flood holds in the gateway, not what it does in the engines it
shares with everyone: an engine cannot pause a forward pass for another key's request. So under
contention (requests waiting here, or the limit all in flight) the gateway stops sharing them
(``gateway.isolation``; on unless ``GATEWAY_ISOLATION`` is off; an endpoint placed by the gateway
on one router with two replica slots or more, no canary): a key over its fair share, among the
keys active within ``GATEWAY_ISOLATION_WINDOW_SECONDS``, is confined to a shard of the replica
slots and to ``limit * shard / slots`` in flight, never borrowing; its overflow waits or is shed
as above. ``slot`` yields the slots a request may be placed on (``gateway.placement``): the
confined key's shard, or for every other key the slots outside all shards. A confined key's
waiting requests do not hold back other keys': a higher class still goes first, among those
that may go in. Alone, a key has the whole endpoint.

Why per process and not shared through Redis: admission is on every request's path, and a Redis
round trip per request (and a notification to wake a waiter in another process) would cost more
than the rest of the gateway's work (``gateway.limits`` leases for the same reason). A load
balancer spreads requests evenly over gateway replicas, so each enforcing its share of the limit
bounds the endpoint as a whole; a flood spread over replicas meets the same fair queue in each.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from gateway import observability as obs
from gateway.errors import GatewayError
from gateway.isolation import WINDOW_SECONDS, Isolation
from gateway.routes import Endpoint, InferenceKey

# Classes in admission order; the last is shed first. Unknown names rank as standard.
PRIORITIES = ("critical", "standard", "batch")
_RANK = {name: rank for rank, name in enumerate(PRIORITIES)}

# A slot's hold time is learned as it goes; until then Retry-After assumes this many seconds.
_FIRST_HOLD_SECONDS = 1.0
_HOLD_SMOOTHING = 0.1
_MAX_RETRY_AFTER = 60.0


def _rank(key: InferenceKey) -> int:
    """The admission rank of ``key``'s priority class (an unknown name ranks as standard)."""
    return _RANK.get(key.priority, _RANK["standard"])


@dataclass(frozen=True)
class AdmissionSettings:
    enabled: bool = True
    queue_factor: float = 4.0  # waiting requests allowed per in-flight slot
    wait_seconds: float = 30.0  # the longest a request waits before 429
    # Share of the limit that keys under their fair share may borrow beyond it, at least (the
    # engines' capacity when larger); 0: no borrowing (see Admission.ceiling_of).
    headroom: float = 0.1
    per_replica: int = 0  # operator override of Endpoint.per_replica; 0: the endpoint's own
    gateway_replicas: int = 1  # gateway processes sharing each endpoint's limit
    # Under contention, keys over their fair share run on a shard of the replicas (see above).
    isolation: bool = True
    isolation_window: float = WINDOW_SECONDS


@dataclass(eq=False, slots=True)
class Waiter:
    key_id: str
    rank: int
    start: float
    finish: float
    seq: int
    admitted: asyncio.Future[None] = field(repr=False)


@dataclass(slots=True)
class _Class:
    """The waiting requests of one priority class on one endpoint."""

    fairest: list[tuple[float, int, Waiter]] = field(default_factory=list)  # by start tag
    furthest: list[tuple[float, int, Waiter]] = field(default_factory=list)  # by -finish tag
    live: dict[int, Waiter] = field(default_factory=dict)  # by arrival (seq)
    virtual: float = 0.0  # V: the start tag of the last request admitted
    last_finish: dict[str, float] = field(default_factory=dict)  # by key id

    def push(self, waiter: Waiter) -> None:
        heapq.heappush(self.fairest, (waiter.start, waiter.seq, waiter))
        heapq.heappush(self.furthest, (-waiter.finish, -waiter.seq, waiter))
        self.live[waiter.seq] = waiter

    def pop_fairest(self, barred: Callable[[str], bool]) -> Waiter | None:
        """The waiter with the smallest start tag whose key is not ``barred`` (a confined key
        holding its whole bound), taken out; None when every waiter's key is barred."""
        passed = []
        found = None
        while self.fairest:
            waiter = self.fairest[0][2]
            if waiter.seq not in self.live:
                heapq.heappop(self.fairest)
            elif barred(waiter.key_id):
                passed.append(heapq.heappop(self.fairest))
            else:
                found = waiter
                break
        for entry in passed:
            heapq.heappush(self.fairest, entry)
        if found is not None:
            self.virtual = found.start
            self._drop(found)
        return found

    def furthest_ahead(self) -> Waiter:
        """The newest request of the key furthest ahead of its share: the one to shed."""
        return _first_live(self.furthest, self.live)

    def remove(self, waiter: Waiter) -> None:
        """Take out a waiter that leaves unserved (shed, timed out, gone)."""
        if waiter.seq not in self.live:
            return
        if self.last_finish.get(waiter.key_id) == waiter.finish:
            # The key's newest request left unserved: its next one should not queue behind it.
            self.last_finish[waiter.key_id] = waiter.start
        self._drop(waiter)

    def _drop(self, waiter: Waiter) -> None:
        """Out of the waiting set; its heap entries are skipped when they come up."""
        del self.live[waiter.seq]
        if not self.live:
            # With nobody waiting, history no longer matters (and the per-key tags stay bounded).
            self.fairest.clear()
            self.furthest.clear()
            self.last_finish.clear()
            self.virtual = 0.0


def _first_live(heap: list[tuple[float, int, Waiter]], live: dict[int, Waiter]) -> Waiter:
    while heap[0][2].seq not in live:
        heapq.heappop(heap)
    return heap[0][2]


@dataclass(slots=True)
class _KeyLoad:
    weight: int
    held: int = 0  # slots in flight
    queued: int = 0
    rank: int = 1  # its priority class


class EndpointGate:
    """One endpoint's requests in flight and waiting, by class and by key."""

    def __init__(self, slug: str) -> None:
        self.slug = slug
        self.limit = 0
        self.ceiling = 0  # in flight at most, borrowed slots included (Admission.ceiling_of)
        self.in_flight = 0
        self.classes = [_Class() for _ in PRIORITIES]
        self.hold_seconds = _FIRST_HOLD_SECONDS  # smoothed time a slot is held
        self._seq = itertools.count()
        self._keys: dict[str, _KeyLoad] = {}  # keys with requests in flight or waiting
        self._active_weight = 0
        self.isolation = Isolation(slug)

    @property
    def waiting(self) -> int:
        return sum(len(c.live) for c in self.classes)

    def try_enter(self, key: InferenceKey, now: float) -> bool:
        """Take a slot now if one is free and nobody who may go in waits, or borrow one if
        ``key`` holds less than its fair share of the limit, nobody of a higher class waits and
        the endpoint is below its ceiling; a confined key holding its bound waits.

        Borrowing is why a key sending at its normal rate beside a flood is not delayed: without
        it, each of its requests would wait for a flood request to finish, however few it sends.
        The flood gives the slots back: it is admitted again only below the limit."""
        self.confine(now, again=self.isolation.arrive(key, now))
        if self._barred(key.id):
            return False
        if self.in_flight < self.limit and not self._waiting_to_go(len(PRIORITIES)):
            return self._take(key)
        return self._may_borrow(key) and self._take(key)

    def _may_borrow(self, key: InferenceKey) -> bool:
        if self.in_flight >= self.ceiling or key.id in self.isolation.shards:
            return False  # a confined key never borrows: the light keys' replicas stay theirs
        if self._waiting_to_go(_rank(key)):
            return False  # a higher class's waiting request goes first, always
        return self._under_share(key)

    def _waiting_to_go(self, rank: int) -> bool:
        """Whether a request of a class above ``rank`` waits that may go in (its key not
        confined at its bound)."""
        if not self.isolation.shards:
            return any(c.live for c in self.classes[:rank])
        return any(
            load.queued > 0 and load.rank < rank and not self._barred(key_id)
            for key_id, load in self._keys.items()
        )

    def _barred(self, key_id: str) -> bool:
        """A confined key holding its shard's part of the limit: its next request waits."""
        bound = self.isolation.bound(key_id, self.limit)
        load = self._keys.get(key_id)
        return bound is not None and load is not None and load.held >= bound

    def confine(self, now: float, again: bool = False) -> None:
        """Decide again which keys are confined (``gateway.isolation``)."""
        contended = self.in_flight >= self.limit or self.waiting > 0
        self.isolation.decide(now, self.limit, contended, self._keys, again)

    def _under_share(self, key: InferenceKey) -> bool:
        load = self._keys.get(key.id)
        held = load.held if load is not None else 0
        weight = max(1, key.weight)
        active = self._active_weight + (0 if load is not None else weight)
        return held < self.limit * weight / active

    def _take(self, key: InferenceKey) -> bool:
        self._load(key).held += 1
        self.in_flight += 1
        return True

    def _load(self, key: InferenceKey) -> _KeyLoad:
        load = self._keys.get(key.id)
        if load is None:
            load = self._keys[key.id] = _KeyLoad(max(1, key.weight), rank=_rank(key))
            self._active_weight += load.weight
        return load

    def _settle(self, key_id: str, held: int = 0, queued: int = 0) -> None:
        load = self._keys[key_id]
        load.held += held
        load.queued += queued
        if load.held <= 0 and load.queued <= 0:
            del self._keys[key_id]
            self._active_weight -= load.weight

    def enqueue(self, key: InferenceKey) -> Waiter:
        rank = _rank(key)
        queue = self.classes[rank]
        start = max(queue.virtual, queue.last_finish.get(key.id, 0.0))
        finish = start + 1.0 / max(1, key.weight)
        queue.last_finish[key.id] = finish
        future = asyncio.get_running_loop().create_future()
        waiter = Waiter(key.id, rank, start, finish, next(self._seq), future)
        queue.push(waiter)
        self._load(key).queued += 1
        return waiter

    def to_shed(self) -> Waiter:
        """The lowest waiting class's newest request of its key furthest over its share."""
        return next(c for c in reversed(self.classes) if c.live).furthest_ahead()

    def remove(self, waiter: Waiter) -> None:
        """A waiting request leaves without a slot (shed, waited too long, client gone)."""
        if waiter.seq in self.classes[waiter.rank].live:
            self.classes[waiter.rank].remove(waiter)
            self._settle(waiter.key_id, queued=-1)

    def release(self, key_id: str, held_seconds: float) -> None:
        self.in_flight -= 1
        self._settle(key_id, held=-1)
        self.hold_seconds += _HOLD_SMOOTHING * (held_seconds - self.hold_seconds)
        self.dispatch()

    def dispatch(self) -> None:
        """Admit waiting requests while slots are free: highest class first, fairest first,
        passing over confined keys at their bound."""
        self.confine(time.monotonic())
        while self.in_flight < self.limit:
            waiter = self._next_waiter()
            if waiter is None:
                return
            self._settle(waiter.key_id, held=1, queued=-1)
            self.in_flight += 1
            waiter.admitted.set_result(None)

    def _next_waiter(self) -> Waiter | None:
        if not self._waiting_to_go(len(PRIORITIES)):
            return None  # nobody waits, or only confined keys at their bound: no scan
        for queue in self.classes:
            waiter = queue.pop_fairest(self._barred) if queue.live else None
            if waiter is not None:
                return waiter
        return None

    def retry_after(self, key_id: str | None = None) -> float:
        """About when a slot frees for a request queued now: the wait ahead of it, at least 1 s.
        A confined key's request waits behind its own key's requests for its shard's part of
        the limit, not behind everyone's for the whole limit."""
        slots, waiting = max(1, self.limit), self.waiting
        bound = self.isolation.bound(key_id, self.limit) if key_id is not None else None
        load = self._keys.get(key_id) if key_id is not None else None
        if bound is not None:
            slots, waiting = max(1, bound), load.queued if load is not None else 0
        ahead = (waiting + 1) / slots * self.hold_seconds
        return min(_MAX_RETRY_AFTER, max(1.0, ahead))


class Admission:
    """The gates of every endpoint this process has served, and the way in."""

    def __init__(self, settings: AdmissionSettings) -> None:
        self.settings = settings
        self._gates: dict[str, EndpointGate] = {}

    def limit_of(self, endpoint: Endpoint) -> int:
        """This process's share of the endpoint's capacity; 0 when it has none to bound by."""
        per_replica = self.settings.per_replica or endpoint.per_replica
        replicas = _replicas(endpoint)
        if per_replica < 1 or replicas < 1:
            return 0
        return max(1, math.ceil(per_replica * replicas / max(1, self.settings.gateway_replicas)))

    def ceiling_of(self, endpoint: Endpoint, limit: int) -> int:
        """The most requests this process lets be in flight, slots borrowed beyond ``limit`` by
        keys under their fair share included: the engines' capacity (this process's share of
        it) when known, or ``headroom`` of the limit beyond it, whichever is larger.

        Either way many light keys cannot pile onto a flood without end: the engines run their
        ``max_running_requests`` at once anyway, and past them a borrowed slot would only queue
        in the engine, behind the flood, first come first served."""
        if self.settings.headroom <= 0:
            return limit
        above = limit + math.ceil(limit * self.settings.headroom)
        engines = endpoint.engine_slots * _replicas(endpoint)
        return max(above, math.ceil(engines / max(1, self.settings.gateway_replicas)))

    def slots_of(self, endpoint: Endpoint) -> int:
        """The replica slots isolation may split: the serving revision's, when the gateway
        places its requests (``gateway.placement``) on one router and no canary takes a share;
        else 0 (no isolation)."""
        if not self.settings.isolation or not endpoint.placed or endpoint.canary is not None:
            return 0
        return endpoint.ready_replicas if len(endpoint.routes) == 1 else 0

    @asynccontextmanager
    async def slot(
        self, endpoint: Endpoint, key: InferenceKey, bounded: bool = True
    ) -> AsyncIterator[frozenset[int] | None]:
        """Hold one of the endpoint's in-flight slots for the body of the ``with``; a request
        that runs no model (``bounded`` False: listing models) passes at once. Yields the replica
        slots the request may be placed on (None: any; a confined key's shard, or the slots
        outside every shard)."""
        limit = self.limit_of(endpoint) if self.settings.enabled and bounded else 0
        if limit < 1:
            yield None
            return
        gate = self._gate(endpoint, limit)
        gate.ceiling = self.ceiling_of(endpoint, limit)
        if not gate.try_enter(key, time.monotonic()):
            await self._wait(gate, key)
        started = time.monotonic()
        try:
            yield gate.isolation.allowed(key.id)
        finally:
            gate.release(key.id, time.monotonic() - started)
            self._publish(gate)

    def _gate(self, endpoint: Endpoint, limit: int) -> EndpointGate:
        gate = self._gates.get(endpoint.id)
        if gate is None:
            gate = self._gates[endpoint.id] = EndpointGate(endpoint.slug)
            gate.isolation.window = self.settings.isolation_window
        gate.isolation.slots = self.slots_of(endpoint)
        if gate.limit != limit:
            gate.limit = limit  # replicas came or went: more room admits waiting requests now
            gate.dispatch()
        return gate

    async def _wait(self, gate: EndpointGate, key: InferenceKey) -> None:
        waiter = gate.enqueue(key)
        if gate.waiting > self._bound(gate):
            victim = gate.to_shed()
            gate.remove(victim)
            error = _shed(gate, PRIORITIES[victim.rank], "queue_full", victim.key_id)
            if victim is waiter:
                self._publish(gate)
                raise error
            victim.admitted.set_exception(error)
        self._publish(gate)
        try:
            async with asyncio.timeout(self.settings.wait_seconds):
                await asyncio.shield(waiter.admitted)
        except TimeoutError:
            if _admitted(waiter):  # admitted as the timer fired: go on
                return
            gate.remove(waiter)
            self._publish(gate)
            raise _shed(gate, key.priority, "wait_exceeded", key.id) from None
        except asyncio.CancelledError:
            # The client hung up: leave the queue, or give back a slot granted meanwhile.
            if _admitted(waiter):
                gate.release(key.id, 0.0)
            else:
                gate.remove(waiter)
                if not waiter.admitted.done():
                    waiter.admitted.cancel()
            self._publish(gate)
            raise

    def _bound(self, gate: EndpointGate) -> int:
        return max(1, int(self.settings.queue_factor * gate.limit))

    @staticmethod
    def _publish(gate: EndpointGate) -> None:
        obs.admission_gauges(gate.slug, gate.waiting, gate.in_flight)


def _replicas(endpoint: Endpoint) -> int:
    """Ready replicas serving the endpoint, a canary's counted too."""
    canary = endpoint.canary.ready_replicas if endpoint.canary is not None else 0
    return endpoint.ready_replicas + canary


def _admitted(waiter: Waiter) -> bool:
    future = waiter.admitted
    return future.done() and not future.cancelled() and future.exception() is None


def _shed(gate: EndpointGate, priority: str, reason: str, key_id: str) -> GatewayError:
    obs.ADMISSION_SHED.labels(gate.slug, priority, reason).inc()
    if reason == "queue_full":
        message = (
            f"endpoint {gate.slug!r} is overloaded: {gate.limit} requests are in flight and its "
            f"queue is full; requests of the lowest waiting priority ({priority!r}) are refused "
            "first. Retry after the time in Retry-After."
        )
    else:
        message = (
            f"endpoint {gate.slug!r} is overloaded: this request waited as long as the gateway "
            f"holds one (priority {priority!r}) without a free slot. Retry after the time in "
            "Retry-After."
        )
    return GatewayError(
        429,
        message,
        code="endpoint_overloaded",
        type="rate_limit_error",
        retry_after=gate.retry_after(key_id),
    )
