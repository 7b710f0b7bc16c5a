"""The fleet planner (``deployments.fleet.plan``): pure, so each case is its numbers."""

from __future__ import annotations

from deployments.fleet.plan import CHEAPEST, SPREAD, WEIGHTED, Slot, hold_shrinks, plan


def test_cheapest_fills_the_cheapest_cluster_up_to_its_capacity_then_the_next() -> None:
    slots = [Slot("east", price=1.0), Slot("west", price=0.5, capacity=3)]
    assert plan(5, slots, CHEAPEST).replicas == {"east": 2, "west": 3}


def test_spread_evenly_gives_the_odd_replica_to_the_cheaper_cluster() -> None:
    slots = [Slot("east", price=1.0), Slot("west", price=0.8), Slot("north", price=2.0)]
    assert plan(4, slots, SPREAD).replicas == {"east": 1, "west": 2, "north": 1}


def test_pinned_weights_split_by_weight_and_overflow_to_the_others() -> None:
    slots = [Slot("east", weight=3), Slot("west", weight=1)]
    assert plan(8, slots, WEIGHTED).replicas == {"east": 6, "west": 2}
    full = [Slot("east", weight=3, capacity=4), Slot("west", weight=1)]
    assert plan(8, full, WEIGHTED).replicas == {"east": 4, "west": 4}


def test_minimums_are_floors_and_raise_a_smaller_total() -> None:
    slots = [Slot("east", price=0.5), Slot("west", min_replicas=1), Slot("north", min_replicas=1)]
    assert plan(3, slots, CHEAPEST).replicas == {"east": 1, "west": 1, "north": 1}
    assert plan(1, slots, CHEAPEST).replicas == {"east": 0, "west": 1, "north": 1}


def test_zero_is_zero_everywhere_whatever_the_minimums() -> None:
    slots = [Slot("east", min_replicas=2), Slot("west")]
    assert plan(0, slots, SPREAD).replicas == {"east": 0, "west": 0}


def test_an_unavailable_cluster_gets_nothing_and_its_share_and_minimum_move() -> None:
    slots = [Slot("east", min_replicas=1, available=False), Slot("west"), Slot("north")]
    assert plan(4, slots, SPREAD).replicas == {"east": 0, "west": 2, "north": 2}


def test_a_drained_cluster_keeps_its_replicas_when_nothing_else_can_take_them() -> None:
    slots = [Slot("east", draining=True), Slot("west", available=False)]
    assert plan(2, slots, SPREAD).replicas == {"east": 2, "west": 0}


def test_what_fits_nowhere_waits_on_the_first_cluster_and_is_counted() -> None:
    slots = [Slot("east", capacity=1), Slot("west", capacity=1, price=2.0)]
    result = plan(4, slots, CHEAPEST)
    assert result.replicas == {"east": 3, "west": 1}
    assert result.unplaced == 2


def test_a_shrink_waits_until_the_replacements_are_ready() -> None:
    # Drain east: west must run 2 ready replicas before east goes from 2 to 0.
    planned = {"east": 0, "west": 2}
    current = {"east": 2, "west": 0}
    available = {"east": True, "west": True}
    assert hold_shrinks(planned, current, {"west": 1}, available) == {"east": 2, "west": 2}
    assert hold_shrinks(planned, current, {"west": 2}, available) == {"east": 0, "west": 2}


def test_nothing_is_asked_of_a_cluster_plinth_cannot_see() -> None:
    planned = {"east": 0, "west": 3}
    held = hold_shrinks(planned, {"east": 2, "west": 1}, {"west": 3}, {"east": False})
    assert held == {"east": 2, "west": 3}
