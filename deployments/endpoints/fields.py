"""Checks of an endpoint's plain fields (slug, display name, message, replica counts), each
refusing with a ServiceError that names the field, as the API and the console show it."""

from __future__ import annotations

import re
from typing import Any

from controlplane.hygiene import MISSING, displayable, text_problem
from controlplane.services import ServiceError
from deployments.endpoints.models import SLUG_MAX_LENGTH, SLUG_RE, slug_validator
from runtime.spec import RuntimeSpec

MAX_REPLICAS = 1000
NAME_MAX_LENGTH = 100
MESSAGE_MAX_LENGTH = 500


# Console paths under /endpoints/ that an endpoint's slug must not shadow.
RESERVED_SLUGS = frozenset({"new", "validate"})


def clean_slug(slug: str) -> str:
    if not isinstance(slug, str) or not slug:
        raise ServiceError("slug: a value is required", field="slug", code=MISSING)
    if slug in RESERVED_SLUGS:
        raise ServiceError(
            f"slug: {slug!r} is reserved; choose another", field="slug", code="reserved_slug"
        )
    if len(slug) > SLUG_MAX_LENGTH or not SLUG_RE.match(slug):
        raise ServiceError(
            f"slug: {displayable(slug[:60])!r} is not DNS-safe: {slug_validator.message}",
            field="slug",
            code="invalid_slug",
        )
    return slug


LABELS_MAX = 32
LABEL_KEY_PATTERN = r"^[a-z0-9]([a-z0-9._/-]{0,61}[a-z0-9])?$"
LABEL_VALUE_MAX_LENGTH = 100


def clean_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels checked: a few lowercase DNS-like keys with short printable values."""
    if len(labels) > LABELS_MAX:
        raise ServiceError(f"at most {LABELS_MAX} labels", field="labels")
    for key, value in labels.items():
        if not re.fullmatch(LABEL_KEY_PATTERN, key):
            raise ServiceError(
                f"label key {key!r} must be lowercase letters, digits, '.', '_', '/' or '-' "
                "(at most 63, starting and ending with a letter or digit)",
                field=f"labels.{key}",
            )
        clean_text(value, f"labels.{key}", LABEL_VALUE_MAX_LENGTH)
    return {key: value.strip() for key, value in labels.items()}


def clean_text(value: str, field: str, max_length: int, *, required: bool = False) -> str:
    """Free text stripped and checked with the platform's one text check, or a ServiceError."""
    value = (value or "").strip()
    if required and not value:
        raise ServiceError(f"{field}: a value is required", field=field, code=MISSING)
    problem = text_problem(value, max_length)
    if problem is not None:
        code, message = problem
        raise ServiceError(f"{field}: {message}", field=field, code=code)
    return value


def check_replicas(replicas: int, spec: dict[str, Any], field: str = "replicas") -> int:
    maximum = min(spec["autoscaling"]["max_replicas"], MAX_REPLICAS)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= maximum:
        raise ServiceError(
            f"replicas must be between 0 and {maximum} (the spec's autoscaling.max_replicas); "
            "raise autoscaling.max_replicas first to go higher",
            field=field,
            code="out_of_range",
        )
    return replicas


def check_limits(spec: RuntimeSpec) -> None:
    if spec.autoscaling.max_replicas > MAX_REPLICAS:
        raise ServiceError(
            f"at most {MAX_REPLICAS} replicas per endpoint",
            field="spec.autoscaling.max_replicas",
            code="out_of_range",
        )


def initial_replicas(spec: RuntimeSpec) -> int:
    autoscaling = spec.autoscaling
    if autoscaling.scale_to_zero:
        return autoscaling.min_replicas
    return max(1, autoscaling.min_replicas)
