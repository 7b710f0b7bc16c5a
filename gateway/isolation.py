"""Tenant isolation under contention: which keys of an endpoint are confined to which replica
slots (``gateway.admission`` bounds them, ``gateway.placement`` places within the slots).

An engine cannot pause a forward pass for another key's request (SGLang does not preempt one),
so beside a flood a light key's request waits for the flood's pass in progress, however the
gateway orders admissions. The fix platforms use for noisy neighbours: stop sharing the engine.
While an endpoint is contended (its gate has requests waiting, or its limit in flight), with two
replica slots or more and two active keys or more, a key whose requests in flight and waiting
exceed its fair share of the limit (``limit * weight / the active keys' weights``) is *heavy*:
confined to ``max(1, floor(slots * weight / the active weights))`` slots and to that part of the
limit in flight. A key is active while it has requests in flight or waiting, or sent one within
``window`` seconds (``GATEWAY_ISOLATION_WINDOW_SECONDS``), so a light key sending one request a
second stays active between its requests.

The slots are chosen from a hash of the key's id (a point on the ring of slots), heavy keys in
the order of their points taking free slots while some are left, so every gateway process picks
the same ones for the same heavy keys. The other keys go to the slots outside every shard while
any remain, else anywhere. A key found heavy stays confined for the window after it last was, so
a flood between two bursts does not spill over the light keys' replicas; once no other key is
active it is free at once, the whole endpoint its own again (work-conserving when alone).

Each change is on the gauge ``plinth_gateway_confined_slots`` (endpoint, key prefix, slots;
never the key's secret) and in a log line.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway import observability as obs
from gateway.routes import InferenceKey

# How long a key stays active after its last request (GATEWAY_ISOLATION_WINDOW_SECONDS).
WINDOW_SECONDS = 10.0
# Which keys are confined is decided again at most this often (and when a key becomes active):
# the decision counts every active key, too much to do on every request of a busy endpoint.
DECIDE_SECONDS = 0.05

logger = logging.getLogger(__name__)


class KeyLoad(Protocol):
    """What admission knows of a key with requests in flight or waiting."""

    weight: int
    held: int
    queued: int


@dataclass(frozen=True, slots=True)
class _Seen:
    at: float  # monotonic time of its last request
    weight: int
    prefix: str  # the key's public prefix, for the gauge and the log (never its secret)


class Isolation:
    """One endpoint's heavy keys and their shards, as decided last."""

    def __init__(self, slug: str, window: float = WINDOW_SECONDS) -> None:
        self.slug = slug
        self.window = window
        self.slots = 0  # replica slots it may split; fewer than 2: none
        self.shards: dict[str, frozenset[int]] = {}  # key id -> the slots it is confined to
        self._seen: dict[str, _Seen] = {}  # key id -> its last request within the window
        self._heavy_until: dict[str, float] = {}  # key id -> confined until (monotonic)
        self._decided_at = -math.inf

    def arrive(self, key: InferenceKey, now: float) -> bool:
        """Note a request of ``key``; True when the key was not active (decide again now)."""
        if self.slots < 2:
            return False
        new = key.id not in self._seen
        self._seen[key.id] = _Seen(now, max(1, key.weight), key.prefix)
        return new

    def allowed(self, key_id: str) -> frozenset[int] | None:
        """The slots a request of ``key_id`` may be placed on now; None: any."""
        shard = self.shards.get(key_id)
        if shard is not None or not self.shards:
            return shard
        rest = frozenset(range(self.slots)).difference(*self.shards.values())
        return rest or None

    def bound(self, key_id: str, limit: int) -> int | None:
        """A confined key's most requests in flight, its shard's part of ``limit``; None for a
        key not confined."""
        shard = self.shards.get(key_id)
        if shard is None:
            return None
        return max(1, limit * len(shard) // max(1, self.slots))

    def decide(
        self,
        now: float,
        limit: int,
        contended: bool,
        loads: Mapping[str, KeyLoad],
        again: bool = False,
    ) -> None:
        """Decide which keys are heavy and their shards: at most every ``DECIDE_SECONDS``, or
        now if ``again``. ``loads``: the keys with requests in flight or waiting."""
        if self.slots < 2:
            self._seen.clear()
            self._heavy_until.clear()
            shards: dict[str, frozenset[int]] = {}
        elif now < self._decided_at + DECIDE_SECONDS and not again:
            return
        else:
            self._decided_at = now
            shards = self._heavy_shards(now, limit, contended, loads)
        if shards != self.shards:
            before, self.shards = self.shards, shards
            self._report(before, limit)

    def _heavy_shards(
        self, now: float, limit: int, contended: bool, loads: Mapping[str, KeyLoad]
    ) -> dict[str, frozenset[int]]:
        """The shards of the keys heavy now or within the window, while another is active."""
        since = now - self.window
        self._seen = {k: seen for k, seen in self._seen.items() if seen.at > since}
        weights = {k: seen.weight for k, seen in self._seen.items()}
        weights.update((k, load.weight) for k, load in loads.items())
        total = sum(weights.values())
        heavy: dict[str, int] = {}
        for key_id, weight in weights.items() if len(weights) >= 2 else ():
            load = loads.get(key_id)
            demand = load.held + load.queued if load is not None else 0
            if contended and demand > limit * weight / total:
                self._heavy_until[key_id] = now + self.window
            if self._heavy_until.get(key_id, 0.0) > now:
                heavy[key_id] = weight
        self._heavy_until = {k: t for k, t in self._heavy_until.items() if t > now}
        return shards_of(heavy, total, self.slots)

    def _report(self, before: dict[str, frozenset[int]], limit: int) -> None:
        """The gauge and a log line for each key confined, moved or freed since ``before``."""
        for key_id in before.keys() - self.shards.keys():
            prefix = self._prefix(key_id)
            obs.confined_slots(self.slug, prefix, before[key_id], None)
            logger.info("endpoint %s: key %s no longer confined", self.slug, prefix)
        for key_id, shard in self.shards.items():
            if before.get(key_id) == shard:
                continue
            prefix = self._prefix(key_id)
            obs.confined_slots(self.slug, prefix, before.get(key_id), shard)
            where = f"replica slots {sorted(shard)} of {self.slots}"
            bound = f"at most {self.bound(key_id, limit)} of {limit} in flight"
            logger.info("endpoint %s: key %s confined to %s (%s)", self.slug, prefix, where, bound)

    def _prefix(self, key_id: str) -> str:
        seen = self._seen.get(key_id)
        return seen.prefix if seen is not None else key_id


def shards_of(heavy: Mapping[str, int], total: int, slots: int) -> dict[str, frozenset[int]]:
    """Each heavy key's slots (``heavy``: key id -> weight, of ``total`` active weight):
    ``max(1, floor(slots * weight / total))`` of them from the point its id hashes to on the
    ring of slots, keys in the order of those points taking free slots while any are left
    (then slots from their point, shared). The same in every process."""
    shards: dict[str, frozenset[int]] = {}
    taken: set[int] = set()
    for key_id in sorted(heavy, key=lambda k: (_ring_point(k), k)):
        size = max(1, slots * heavy[key_id] // total)
        start = _ring_point(key_id) % slots
        ring = [(start + i) % slots for i in range(slots)]
        free = [s for s in ring if s not in taken][:size]
        shard = frozenset(free or ring[:size])
        taken |= shard
        shards[key_id] = shard
    return shards


def _ring_point(key_id: str) -> int:
    digest = hashlib.blake2b(key_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
