"""HiCache in the simulator: a host-memory tier, and optionally a storage tier, under the GPU's
radix cache (``--enable-hierarchical-cache``, ``--hicache-*``).

Each lower tier is a radix tree of token ids with its own capacity and LRU (SGLang's host pool
mirrors the device tree's nodes the same way). What reaches the host tier depends on the write
policy: ``write_through`` copies every prefix the GPU caches as it is cached (asynchronously);
``write_through_selective`` only prefixes that were reused (SGLang's hit-count threshold of 2);
``write_back`` copies a node when the GPU evicts it, and the eviction waits for the copy. With a
storage tier every page the host holds is backed up to storage too (asynchronously), so the host
tier's own evictions lose nothing that storage keeps.

A request's prefix is looked up in all tiers at admission: what the host holds beyond the GPU's
match is loaded back over the host link, what only storage holds is prefetched through the host.
The scheduler (``runtime.sim.scheduler``) asks; the engine charges each step's traffic with
``runtime.perf.kv_tiers.step_seconds``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from runtime.perf.kv_tiers import TierTraffic
from runtime.sim.radix import RadixCache

UNBOUNDED = 1 << 62  # a storage tier's capacity: far beyond any working set a run builds


class TierCache:
    """One lower tier: token prefixes in a radix tree, at most ``capacity`` tokens, LRU."""

    def __init__(self, capacity: int, page_size: int) -> None:
        self.capacity = max(0, capacity)
        self.tree = RadixCache(page_size)

    @property
    def used(self) -> int:
        return self.tree.total_size

    def holds(self, ids: list[int]) -> int:
        """How many leading tokens of ``ids`` this tier holds (and marks them recently used)."""
        return self.tree.match_prefix(ids).length

    def put(self, ids: list[int]) -> int:
        """Store ``ids``; return the tokens that were new here. Over capacity, the least recently
        used prefixes go."""
        if not self.capacity:
            return 0
        new = len(ids) - len(ids) % self.tree.page_size - self.tree.insert(ids)
        if self.tree.total_size > self.capacity:
            self.tree.evict(self.tree.total_size - self.capacity)
        return new


@dataclass(frozen=True)
class HiCacheConfig:
    host_tokens: int
    write_policy: str  # write_through | write_through_selective | write_back
    storage: bool
    kv_bytes_per_token: float  # one GPU's shard: what its own host link moves
    page_size: int = 1
    # All ranks' shards: a storage tier is one node's disk or NIC, shared by the TP group.
    storage_bytes_per_token: float = 0.0


@dataclass
class TierHit:
    """Where a request's cached prefix came from, in tokens."""

    host: int = 0
    storage: int = 0
    upto: int = 0  # the prefix length the tiers cover together


@dataclass
class HiCacheStats:
    """Running totals, for ``/metrics`` under SGLang's names."""

    load_back_tokens: int = 0  # host -> GPU
    prefetched_tokens: int = 0  # storage -> host
    backup_tokens: int = 0  # GPU -> host
    storage_backup_tokens: int = 0  # host -> storage
    host_hit_tokens: int = 0
    storage_hit_tokens: int = 0
    traffic: TierTraffic = field(default_factory=TierTraffic)


class HiCache:
    def __init__(self, config: HiCacheConfig) -> None:
        self.config = config
        self.host = TierCache(config.host_tokens, config.page_size)
        self.storage = TierCache(UNBOUNDED, config.page_size) if config.storage else None
        self.stats = HiCacheStats()
        self.storage_free_at = 0.0  # when the storage link finishes the reads queued on it
        # Seconds to read n bytes from storage (the engine sets it from runtime.perf.kv_tiers).
        self.storage_seconds: Callable[[float], float] = lambda nbytes: 0.0

    def lookup(self, ids: list[int], device_len: int) -> TierHit:
        """Tokens of ``ids`` beyond the GPU's ``device_len`` that the host, then storage, hold."""
        host_len = self.host.holds(ids)
        storage_len = self.storage.holds(ids) if self.storage is not None else 0
        host = max(0, host_len - device_len)
        storage = max(0, storage_len - max(device_len, host_len))
        return TierHit(host, storage, max(device_len, host_len, storage_len))

    def prefetch(self, ids: list[int], hit: TierHit, now: float) -> float:
        """Start reading ``hit.storage`` tokens of ``ids`` from storage into the host tier, after
        the reads already queued on the storage link; when they are there (simulated time).
        The pages count as in host memory from now on (the scheduler holds the request until
        then)."""
        per_token = self.config.storage_bytes_per_token or self.config.kv_bytes_per_token
        nbytes = hit.storage * per_token
        start = max(now, self.storage_free_at)
        self.storage_free_at = start + self.storage_seconds(nbytes)
        self.stats.prefetched_tokens += hit.storage
        self.stats.storage_hit_tokens += hit.storage
        self.host.put(ids[: hit.upto])
        return self.storage_free_at

    def loaded(self, ids: list[int], hit: TierHit) -> None:
        """``hit`` was moved into the GPU for the prefix ``ids``: charge it, count it; pages
        prefetched from storage stay in the host tier too."""
        per_token = self.config.kv_bytes_per_token
        traffic, stats = self.stats.traffic, self.stats
        traffic.host_load += hit.host * per_token
        traffic.storage_load += hit.storage * (self.config.storage_bytes_per_token or per_token)
        stats.load_back_tokens += hit.host + hit.storage
        stats.host_hit_tokens += hit.host
        stats.storage_hit_tokens += hit.storage
        if hit.storage:
            stats.prefetched_tokens += hit.storage
            self.host.put(ids)

    def cached(self, ids: list[int], new_tokens: int, reused: bool) -> None:
        """The GPU cached ``new_tokens`` more of ``ids`` (``reused``: the request had a cache
        hit): write-through policies copy them to the host tier now."""
        policy = self.config.write_policy
        if new_tokens <= 0 or policy == "write_back":
            return
        if policy == "write_through_selective" and not reused:
            return
        self._backup(ids, new_tokens, synchronous=False)

    def evicted(self, path: list[int], leaf_tokens: int) -> None:
        """The GPU evicted the last ``leaf_tokens`` of ``path``: write-back copies them first."""
        if self.config.write_policy != "write_back":
            return
        if self.host.holds(path) >= len(path):
            return  # already there (loaded back from it, and not dropped since)
        self._backup(path, leaf_tokens, synchronous=True)

    def _backup(self, ids: list[int], tokens: int, synchronous: bool) -> None:
        nbytes = tokens * self.config.kv_bytes_per_token
        if synchronous:
            self.stats.traffic.write_back += nbytes
        else:
            self.stats.traffic.write_through += nbytes
        self.stats.backup_tokens += tokens
        self.host.put(ids)
        if self.storage is not None:
            self.stats.storage_backup_tokens += self.storage.put(ids)

    def take_traffic(self) -> TierTraffic:
        """The traffic since the last call (what the next step pays for)."""
        traffic, self.stats.traffic = self.stats.traffic, TierTraffic()
        return traffic

    def reset(self) -> None:
        """``/flush_cache``: SGLang's flush clears the host pool with the device's; a storage
        tier is shared and outlives the engine, so it keeps its pages."""
        self.host = TierCache(self.config.host_tokens, self.config.page_size)
