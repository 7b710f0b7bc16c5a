"""Template filters and tags of the console: readable status names, spec values, limits."""

from __future__ import annotations

import json
from typing import Any

from django import template

from deployments.views.playground import LIMITS

register = template.Library()


@register.filter
def status_label(status: str) -> str:
    """``scaled_to_zero`` -> ``Scaled to zero``."""
    return str(status).replace("_", " ").capitalize()


@register.filter
def spec_value(value: Any) -> str:
    """A spec value as a person reads it: a dash for unset, JSON for lists and dicts."""
    if value is None:
        return "\N{EN DASH}"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


@register.simple_tag
def playground_limit(name: str) -> int:
    """A playground input's limit, as the server enforces it (for the form's attributes)."""
    return LIMITS[name]
