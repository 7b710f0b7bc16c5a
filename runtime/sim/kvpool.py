"""The paged KV pool: a fixed number of token slots shared by running requests and the prefix cache.

Slots are either private to a request (prompt tokens being prefilled, decoded tokens), held by the
radix cache, or free. When free slots run short the pool evicts unlocked cached prefixes (LRU); when
that is not enough the caller must retract a request.
"""

from __future__ import annotations

from runtime.sim.radix import RadixCache


class KvPool:
    def __init__(self, capacity: int, cache: RadixCache) -> None:
        self.capacity = capacity
        self.cache = cache
        self.private = 0

    @property
    def free(self) -> int:
        return self.capacity - self.private - self.cache.total_size

    @property
    def available(self) -> int:
        """Slots a new request could get: free ones plus evictable cached ones."""
        return self.free + self.cache.evictable_size

    @property
    def used(self) -> int:
        """Slots in use that cannot be evicted (SGLang's ``num_used_tokens``)."""
        return self.capacity - self.available

    def try_alloc(self, tokens: int) -> bool:
        if tokens <= 0:
            return True
        if self.free < tokens:
            self.cache.evict(tokens - self.free)
        if self.free < tokens:
            return False
        self.private += tokens
        return True

    def release(self, tokens: int) -> None:
        self.private -= tokens
        assert self.private >= 0, "KV pool released more slots than it gave out"
