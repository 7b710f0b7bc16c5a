"""Template filters and tags of the console: readable status names, spec values, limits."""

from __future__ import annotations

import json
from typing import Any

from django import template

from deployments.endpoints import presets
from deployments.endpoints.models import Deployment, DeploymentEvent
from deployments.endpoints.timeline import Rollout, by_rollout
from deployments.endpoints.views.onboarding import first_call_context
from deployments.endpoints.views.playground import LIMITS, compare_choices

register = template.Library()


@register.filter
def rollouts(events: list[DeploymentEvent]) -> list[Rollout]:
    """An endpoint's events grouped by the rollout (revision) they belong to."""
    return by_rollout(events)


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


@register.simple_tag(takes_context=True)
def playground_compare(context: template.Context, endpoint: Deployment) -> dict[str, Any]:
    """What the endpoint's playground can compare it with (a running canary, other endpoints)."""
    return compare_choices(context["actor"], endpoint)


@register.simple_tag(takes_context=True)
def first_call(context: template.Context, endpoint: Deployment) -> dict[str, Any]:
    """The endpoint page's "call it now" card, as its poll renders it."""
    return first_call_context(context["actor"], endpoint)


@register.simple_tag
def endpoint_templates() -> tuple[presets.Preset, ...]:
    """The wizard's templates, offered by the empty endpoint list."""
    return presets.PRESETS
