"""The Optimize page's objective: the cheapest layout for the rate, or the most tokens/s per GPU
within the targets on a GPU budget (AIConfigurator's question)."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.console.test_optimize import _ask

pytestmark = pytest.mark.django_db


def test_the_form_offers_the_objective_with_cost_first(carol: Client) -> None:
    body = carol.get("/optimize/").content.decode()
    assert 'id="opt-objective"' in body
    assert '<option value="cost" selected>' in body


def test_throughput_objective_heads_the_pick_and_notes_the_budget(alice: Client) -> None:
    response = _ask(alice, objective="throughput", max_gpus="8")
    body = response.content.decode()
    assert response.status_code == 200
    assert "Most tokens/s per GPU meeting the targets" in body
    assert '<option value="throughput" selected>' in body
    assert "Cheapest meeting the targets" in _ask(alice).content.decode()


def test_an_unknown_objective_is_refused_by_its_field(alice: Client) -> None:
    response = _ask(alice, objective="speed")
    body = response.content.decode()
    assert response.status_code == 422
    assert 'id="issues-opt-objective"><p class="issue issue-error">' in body
