"""Shared pieces of the runtime tests (no Django: `runtime` is framework-free)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

MINIMAL: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
}

SpecData = Callable[..., dict[str, Any]]


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` merged in, one level of groups deep (groups replace keys)."""
    out = copy.deepcopy(base)
    for group, values in overrides.items():
        if isinstance(values, dict) and isinstance(out.get(group), dict):
            out[group].update(values)
        else:
            out[group] = values
    return out


@pytest.fixture
def spec_data() -> SpecData:
    """Build spec input: the minimal spec (8B on one H100) with groups overridden."""

    def build(**overrides: Any) -> dict[str, Any]:
        return merge(MINIMAL, overrides)

    return build
