"""The prefix cache: a radix tree over token ids with reference locks and LRU eviction.

Shaped after SGLang's ``RadixCache``: edges carry runs of token ids, a request locks the path of its
matched prefix while it runs, and eviction removes least-recently-used unlocked leaves. Sizes are
counted in tokens; the KV pool asks the tree to evict when it runs short.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(eq=False)
class RadixNode:
    key: list[int] = field(default_factory=list)
    parent: RadixNode | None = None
    children: dict[int, RadixNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0


@dataclass
class PrefixMatch:
    """The cached length of a key and the deepest node of the match (lock it while in use)."""

    length: int
    node: RadixNode


class RadixCache:
    def __init__(self, page_size: int = 1, disabled: bool = False) -> None:
        self.page_size = max(1, page_size)
        self.disabled = disabled
        self.evicted_tokens_total = 0
        # Told (the evicted node's full token path, its own tokens) before a node goes: HiCache's
        # write-back copies it to the host tier first (runtime.sim.hicache).
        self.on_evict: Callable[[list[int], int], None] | None = None
        self.reset()

    def reset(self) -> None:
        self.root = RadixNode(lock_ref=1)
        self.total_size = 0
        self.evictable_size = 0
        self._clock = 0

    def match_prefix(self, ids: list[int]) -> PrefixMatch:
        if self.disabled:
            return PrefixMatch(0, self.root)
        key = ids[: self._aligned(len(ids))]
        node, matched = self.root, 0
        self._touch(node)
        while matched < len(key):
            child = node.children.get(key[matched])
            if child is None:
                break
            common = _common_length(child.key, key, matched)
            if common < len(child.key):
                child = self._split(child, common)
            node = child
            matched += common
            self._touch(node)
        return PrefixMatch(matched, node)

    def insert(self, ids: list[int]) -> int:
        """Cache ``ids``; return how many of them were cached already."""
        if self.disabled:
            return 0
        key = ids[: self._aligned(len(ids))]
        match = self.match_prefix(key)
        rest = key[match.length :]
        if rest:
            leaf = RadixNode(key=list(rest), parent=match.node)
            match.node.children[rest[0]] = leaf
            self._touch(leaf)
            self.total_size += len(rest)
            self.evictable_size += len(rest)
        return match.length

    def lock(self, node: RadixNode) -> None:
        current: RadixNode | None = node
        while current is not None and current is not self.root:
            if current.lock_ref == 0:
                self.evictable_size -= len(current.key)
            current.lock_ref += 1
            current = current.parent

    def unlock(self, node: RadixNode) -> None:
        current: RadixNode | None = node
        while current is not None and current is not self.root:
            current.lock_ref -= 1
            if current.lock_ref == 0:
                self.evictable_size += len(current.key)
            current = current.parent

    def evict(self, num_tokens: int) -> int:
        """Free ``num_tokens`` by removing least-recently-used unlocked leaves (or all of them)."""
        # A parent left without children becomes a leaf, and a candidate, in turn.
        heap = [(n.last_access, id(n), n) for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while heap and freed < num_tokens:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            assert parent is not None
            if self.on_evict is not None:
                self.on_evict(self.path_of(leaf), len(leaf.key))
            del parent.children[leaf.key[0]]
            freed += len(leaf.key)
            self.total_size -= len(leaf.key)
            self.evictable_size -= len(leaf.key)
            if parent is not self.root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        self.evicted_tokens_total += freed
        return freed

    def path_of(self, node: RadixNode) -> list[int]:
        """The token ids from the root down to the end of ``node``'s edge."""
        parts: list[list[int]] = []
        current: RadixNode | None = node
        while current is not None and current is not self.root:
            parts.append(current.key)
            current = current.parent
        return [token for part in reversed(parts) for token in part]

    def _leaves(self) -> list[RadixNode]:
        leaves, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.children:
                stack.extend(node.children.values())
            else:
                leaves.append(node)
        return leaves

    def _split(self, child: RadixNode, at: int) -> RadixNode:
        """Cut ``child``'s edge after ``at`` tokens; return the new upper node."""
        parent = child.parent
        assert parent is not None
        upper = RadixNode(
            key=child.key[:at],
            parent=parent,
            lock_ref=child.lock_ref,
            last_access=child.last_access,
        )
        parent.children[upper.key[0]] = upper
        child.key = child.key[at:]
        child.parent = upper
        upper.children[child.key[0]] = child
        return upper

    def _touch(self, node: RadixNode) -> None:
        self._clock += 1
        node.last_access = self._clock

    def _aligned(self, length: int) -> int:
        return length - length % self.page_size


def _common_length(edge: list[int], key: list[int], start: int) -> int:
    limit = min(len(edge), len(key) - start)
    # Compare in slices first: long shared system prompts make this the hot path.
    step = 64
    i = 0
    while i + step <= limit and edge[i : i + step] == key[start + i : start + i + step]:
        i += step
    while i < limit and edge[i] == key[start + i]:
        i += 1
    return i
