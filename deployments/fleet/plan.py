"""The fleet planner: an endpoint's desired replicas split over its clusters. Pure: no ORM.

``plan`` takes the total and one ``Slot`` per cluster the endpoint names (its minimum and
weight, what fits there, its price factor, whether it is available and not drained) and answers
how many replicas each cluster should run. Then ``hold_shrinks`` makes the change safe: a
cluster's count only goes down once the replicas that replace it elsewhere are ready (make
before break), which is what a drain and a return after failover both rely on.

Decided where the issue is silent:
- Per-cluster minimums are floors while the endpoint serves: a total below their sum is raised
  to it (as an autoscaling minimum would be); at zero (stopped, scaled to zero) nothing runs.
- A cluster Plinth cannot see (unavailable) or one being drained gets nothing new; its
  minimum moves to the others. When nothing else can take the replicas, a drained cluster keeps
  them (a drain never takes an endpoint down); an unavailable one is only left alone.
- Replicas that fit nowhere (every cluster's free GPUs taken) go to the first cluster in the
  policy's order, where they wait as unschedulable pods, exactly as on one cluster today;
  ``Plan.unplaced`` counts them for the timeline.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CHEAPEST = "cheapest"
SPREAD = "spread"
WEIGHTED = "weighted"
POLICIES = (CHEAPEST, SPREAD, WEIGHTED)


@dataclass(frozen=True)
class Slot:
    """One cluster as the planner sees it for one endpoint."""

    cluster: str  # its name: plans and timeline lines speak of clusters by name
    min_replicas: int = 0
    weight: int = 1
    # Replicas of this endpoint that fit there (its free GPUs and quota, plus what it runs there
    # already); None: unknown (no inventory, the local cluster), taken as no limit.
    capacity: int | None = None
    price: float = 1.0  # relative GPU-hour price (``ClusterSettings.gpu_price_factor``)
    available: bool = True
    draining: bool = False

    @property
    def eligible(self) -> bool:
        return self.available and not self.draining

    def room(self, assigned: int) -> int | None:
        return None if self.capacity is None else max(0, self.capacity - assigned)


@dataclass(frozen=True)
class Plan:
    replicas: dict[str, int]  # cluster name -> replicas it should run
    unplaced: int = 0  # replicas over every cluster's capacity (left pending on the first)


def plan(total: int, slots: Sequence[Slot], policy: str) -> Plan:
    """Per-cluster replicas for ``total`` desired replicas under ``policy``."""
    names = [s.cluster for s in slots]
    if total <= 0 or not slots:
        return Plan(replicas=dict.fromkeys(names, 0))
    eligible = [s for s in slots if s.eligible]
    if not eligible:
        # Nowhere to move to: a drained cluster keeps serving; a lost one is left as it is.
        kept = [s for s in slots if s.available]
        return _keep(total, slots, kept)
    total = max(total, sum(s.min_replicas for s in eligible))
    assigned = dict.fromkeys(names, 0)
    for slot in eligible:
        room = slot.room(0)
        assigned[slot.cluster] = slot.min_replicas if room is None else min(slot.min_replicas, room)
    left = total - sum(assigned.values())
    fill = _FILLS.get(policy, _fill_cheapest)
    unplaced = fill(left, eligible, assigned)
    if unplaced:
        first = _order(eligible, policy)[0].cluster
        assigned[first] += unplaced
    return Plan(replicas=assigned, unplaced=unplaced)


def _keep(total: int, slots: Sequence[Slot], kept: Sequence[Slot]) -> Plan:
    replicas = dict.fromkeys((s.cluster for s in slots), 0)
    if kept:
        # Drained clusters only: they keep the endpoint serving, split evenly.
        _fill_spread(total, [Slot(s.cluster) for s in kept], replicas)
    return Plan(replicas=replicas)


def _order(slots: Sequence[Slot], policy: str) -> list[Slot]:
    if policy == WEIGHTED:
        return sorted(slots, key=lambda s: (-s.weight, s.price, s.cluster))
    return sorted(slots, key=lambda s: (s.price, s.cluster))


def _fill_cheapest(left: int, slots: Sequence[Slot], assigned: dict[str, int]) -> int:
    """The cheapest cluster up to what fits there, then the next."""
    for slot in _order(slots, CHEAPEST):
        room = slot.room(assigned[slot.cluster])
        take = left if room is None else min(left, room)
        assigned[slot.cluster] += take
        left -= take
    return left


def _fill_spread(left: int, slots: Sequence[Slot], assigned: dict[str, int]) -> int:
    """One at a time to the cluster with fewest (the cheaper on a tie), within capacity."""
    while left > 0:
        open_slots = [s for s in slots if s.room(assigned[s.cluster]) != 0]
        if not open_slots:
            return left
        slot = min(open_slots, key=lambda s: (assigned[s.cluster], s.price, s.cluster))
        assigned[slot.cluster] += 1
        left -= 1
    return 0


def _fill_weighted(left: int, slots: Sequence[Slot], assigned: dict[str, int]) -> int:
    """Shares by weight of the whole (largest remainder), within capacity; what a full
    cluster cannot take goes to the others by weight."""
    while left > 0:
        open_slots = [s for s in slots if s.room(assigned[s.cluster]) != 0 and s.weight > 0]
        if not open_slots:
            return _fill_spread(left, [s for s in slots if s.weight == 0], assigned)
        whole = sum(assigned[s.cluster] for s in open_slots) + left
        weights = sum(s.weight for s in open_slots)
        # Deficit of each against its share of the whole; the largest deficit takes one.
        slot = max(
            open_slots,
            key=lambda s: (whole * s.weight / weights - assigned[s.cluster], s.weight, -s.price),
        )
        assigned[slot.cluster] += 1
        left -= 1
    return 0


_FILLS = {CHEAPEST: _fill_cheapest, SPREAD: _fill_spread, WEIGHTED: _fill_weighted}


def hold_shrinks(
    planned: Mapping[str, int],
    current: Mapping[str, int],
    ready: Mapping[str, int],
    available: Mapping[str, bool],
) -> dict[str, int]:
    """Make before break: a cluster planned below what it runs keeps its current count until
    the clusters planned to grow have their planned replicas ready. A cluster Plinth cannot see
    is never told anything (its current count stands: nothing is deleted there)."""
    held = dict(planned)
    growing = [c for c, n in planned.items() if n > current.get(c, 0) and available.get(c, True)]
    replaced = all(ready.get(c, 0) >= planned[c] for c in growing)
    for name, count in planned.items():
        if not available.get(name, True):
            held[name] = current.get(name, 0)
        elif count < current.get(name, 0) and not replaced:
            held[name] = current[name]
    return held
