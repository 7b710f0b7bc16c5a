"""The validation rules, one module per concern; `ALL_RULES` runs in this order."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from runtime.issues import Issue
from runtime.rules import (
    batching,
    deployment,
    flags,
    kv_tiers,
    lora,
    memory_fit,
    parallel,
    quantization,
    speculator,
)
from runtime.rules.context import RuleContext

Rule = Callable[[RuleContext], Iterable[Issue]]

ALL_RULES: tuple[Rule, ...] = (
    *deployment.MODEL_RULES,
    *parallel.RULES,
    *memory_fit.RULES,
    *kv_tiers.RULES,
    *lora.RULES,
    *batching.RULES,
    *quantization.RULES,
    *speculator.RULES,
    *deployment.RULES,
    *flags.RULES,
)

__all__ = ["ALL_RULES", "Rule", "RuleContext"]
