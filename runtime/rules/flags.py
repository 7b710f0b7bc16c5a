"""Flag rules: extra flags against the allowlist and denylist, every emitted argv against the
catalogues."""

from __future__ import annotations

from collections.abc import Iterator

from runtime.argv import UnsafeArgvError
from runtime.catalog import sglang_flags, smg_flags
from runtime.extra_flags import refusal
from runtime.issues import Issue, error
from runtime.launch import plan
from runtime.rules.context import RuleContext
from runtime.spec import RuntimeSpec


def extra_flags(ctx: RuleContext) -> Iterator[Issue]:
    catalog = sglang_flags(ctx.spec.runtime.sglang_version)
    for flag, value in sorted(ctx.spec.runtime.extra_flags.items()):
        found = refusal(flag, value, catalog)
        if found is not None:
            yield error(f"runtime.extra_flags.{flag}", found.code, found.message, found.fix)


def _without_refused_extras(spec: RuntimeSpec) -> RuntimeSpec:
    """`spec` less the extra flags `extra_flags` reports: the plan refuses to emit those."""
    catalog = sglang_flags(spec.runtime.sglang_version)
    kept = {f: v for f, v in spec.runtime.extra_flags.items() if refusal(f, v, catalog) is None}
    runtime = spec.runtime.model_copy(update={"extra_flags": kept})
    return spec.model_copy(update={"runtime": runtime})


def emitted_argv(ctx: RuleContext) -> Iterator[Issue]:
    """A safety net: whatever Plinth would emit must parse with the pinned parsers."""
    spec = _without_refused_extras(ctx.spec)
    try:
        launch = plan(spec)
    except UnsafeArgvError as exc:
        yield error(exc.field, "unsafe_value", str(exc), "this is a Plinth bug; please report it")
        return
    engines = sglang_flags(spec.runtime.sglang_version)
    for role in launch.roles:
        catalog = smg_flags() if role.role == "router" else engines
        for problem in catalog.check(role.args):
            yield error(
                "runtime",
                "launch_flag_rejected",
                f"{role.role}: {problem.flag} {problem.value or ''}: {problem.message}".strip(),
                "this is a Plinth bug; please report the spec",
            )


RULES = (extra_flags, emitted_argv)
