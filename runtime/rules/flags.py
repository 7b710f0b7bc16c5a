"""Flag rules: extra flags against the allowlist, and every emitted argv against the catalogues."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from runtime.catalog import FlagCatalog, sglang_flags, smg_flags
from runtime.extra_flags import EXTRA_FLAG_ALLOWLIST, flag_argv
from runtime.issues import Issue, error
from runtime.launch import plan
from runtime.rules.context import RuleContext


def _unknown_flag(flag: str, catalog: FlagCatalog, field: str) -> Issue:
    names = [spec.flag for spec in catalog.flags()]
    # argparse would take an unambiguous prefix (`--tp` for `--tp-size`); Plinth never does.
    prefixed = [name for name in names if name.startswith(flag + "-")]
    close = prefixed[:3] or difflib.get_close_matches(flag, names, n=3)
    return error(
        field,
        "flag_unknown",
        f"{flag} is not a flag of SGLang {catalog.version}",
        f"did you mean {' or '.join(close)}?" if close else "remove it",
    )


def _extra_flag(flag: str, ctx: RuleContext, catalog: FlagCatalog) -> Iterator[Issue]:
    field = f"runtime.extra_flags.{flag}"
    spec = catalog.get(flag)
    if spec is None:
        yield _unknown_flag(flag, catalog, field)
        return
    if flag != spec.flag:
        yield error(
            field,
            "flag_not_canonical",
            f"{flag} is an alias; Plinth writes canonical flag names only",
            f"use {spec.flag}",
        )
        return
    if flag not in EXTRA_FLAG_ALLOWLIST:
        yield error(
            field,
            "flag_not_allowed",
            f"{flag} is not allowed as an extra flag: Plinth sets it from the spec or it could "
            "break the deployment",
            "use the matching spec field; allowed extra flags: "
            + ", ".join(sorted(EXTRA_FLAG_ALLOWLIST)),
        )
        return
    for problem in catalog.check(flag_argv(flag, ctx.spec.runtime.extra_flags[flag])):
        yield error(field, "flag_invalid_value", f"{flag}: {problem.message}", _value_fix(spec))


def _value_fix(spec: object) -> str:
    choices = getattr(spec, "choices", None)
    kind = getattr(spec, "type", None)
    if choices:
        return "use one of: " + ", ".join(choices)
    if getattr(spec, "store_true", False):
        return "use true or false"
    return f"give a {kind or 'string'} value"


def extra_flags(ctx: RuleContext) -> Iterator[Issue]:
    catalog = sglang_flags(ctx.spec.runtime.sglang_version)
    for flag in sorted(ctx.spec.runtime.extra_flags):
        yield from _extra_flag(flag, ctx, catalog)


def emitted_argv(ctx: RuleContext) -> Iterator[Issue]:
    """A safety net: whatever Plinth would emit must parse with the pinned parsers."""
    engines = sglang_flags(ctx.spec.runtime.sglang_version)
    for role in plan(ctx.spec).roles:
        catalog = smg_flags() if role.role == "router" else engines
        for problem in catalog.check(role.args):
            if problem.flag in ctx.spec.runtime.extra_flags:
                continue  # reported against the extra flag itself
            yield error(
                "runtime",
                "launch_flag_rejected",
                f"{role.role}: {problem.flag} {problem.value or ''}: {problem.message}".strip(),
                "this is a Plinth bug; please report the spec",
            )


RULES = (extra_flags, emitted_argv)
