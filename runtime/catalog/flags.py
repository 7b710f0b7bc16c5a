"""Flag catalogues of the launchers Plinth drives (SGLang server, smg router), per version.

The data files are trimmed dumps of each release's argparse parser, produced by
`scripts/regen_sglang_flags.py`. `FlagCatalog.check` reads an argv the way argparse would and
reports what the real parser would refuse, plus what it would accept but Plinth never emits
(aliases, abbreviations, repeated flags, deprecated flags).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

_DIR = Path(__file__).parent

SUPPORTED_SGLANG_VERSIONS: tuple[str, ...] = ("0.5.23",)
DEFAULT_SGLANG_VERSION = "0.5.23"
SMG_VERSION = "1.13.0"

FlagKind = Literal["store", "store_true", "store_false", "boolean_optional", "append", "extend"]

# Values argparse does not restrict but SGLang's start-up resolution does (SGLANG.md section 1.6):
# checking them here catches at plan time what would otherwise fail only on a GPU.
_RESOLUTION_CHOICES: dict[str, tuple[str, ...]] = {
    "--speculative-algorithm": (
        "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO",
    ),
}  # fmt: skip

# SGLang's human_readable_int: 32k = 32000, 32Ki = 32768, plain integers too.
_HUMAN_INT = re.compile(r"\A\d+(\.\d+)?([kKmMgGtT]i?)?\Z")  # \Z: "$" accepts a final newline


@dataclass(frozen=True)
class FlagSpec:
    """One option as the parser declares it; `flag` is the canonical long name."""

    flag: str
    aliases: tuple[str, ...]
    dest: str
    kind: str
    type: str | None
    choices: tuple[str, ...] | None
    nargs: str | None
    default: Any
    deprecated: bool
    # The choices the parser itself enforces (a bad one exits 2); ``choices`` adds those SGLang
    # checks only at start-up (``_RESOLUTION_CHOICES``).
    parser_choices: tuple[str, ...] | None = None

    @property
    def takes_value(self) -> bool:
        return self.nargs != "0"

    @property
    def store_true(self) -> bool:
        return self.kind in {"store_true", "boolean_optional"}


@dataclass(frozen=True)
class FlagProblem:
    """Why a piece of argv would be refused or is not canonical."""

    flag: str
    message: str
    value: str | None = None


def _value_problem(spec: FlagSpec, value: str) -> str | None:
    if spec.choices is not None and value not in spec.choices:
        return f"{value!r} is not one of: {', '.join(spec.choices)}"
    if spec.type == "int" or spec.type == "non_negative_int":
        try:
            number = int(value)
        except ValueError:
            return f"{value!r} is not an integer"
        if spec.type == "non_negative_int" and number < 0:
            return f"{value!r} must be >= 0"
    elif spec.type == "float":
        try:
            float(value)
        except ValueError:
            return f"{value!r} is not a number"
    elif spec.type == "human_int" and not _HUMAN_INT.match(value):
        return f"{value!r} is not an integer (suffixes k, M, Ki, Mi allowed)"
    elif spec.type in {"json", "json_list"}:
        return _json_problem(value, want_list=spec.type == "json_list")
    return None


def _json_problem(value: str, *, want_list: bool) -> str | None:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        return f"{value!r} is not valid JSON"
    if want_list and not isinstance(parsed, list):
        return f"{value!r} is not a JSON list"
    return None


def arity_problem(spec: FlagSpec, count: int) -> str | None:
    """Why `count` values do not suit `spec`'s nargs (None when they do)."""
    if spec.nargs == "0" and count:
        return "takes no value"
    if spec.nargs is None and count != 1:
        return "needs exactly one value"
    if spec.nargs == "+" and count < 1:
        return "needs at least one value"
    if spec.nargs == "?" and count > 1:
        return "takes at most one value"
    if spec.nargs is not None and spec.nargs.isdigit() and count != int(spec.nargs):
        return f"needs exactly {spec.nargs} values"
    return None


def split_argv(argv: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Group argv into (flag, values). Values are the tokens up to the next `--` token.

    `--flag=value` is split like argparse does. A leading token that is not a flag is reported as a
    flag named "" so callers notice stray positionals.
    """
    groups: list[tuple[str, list[str]]] = []
    for token in argv:
        if token.startswith("--"):
            flag, eq, inline = token.partition("=")
            groups.append((flag, [inline] if eq else []))
        elif groups:
            groups[-1][1].append(token)
        else:
            groups.append(("", [token]))
    return groups


class FlagCatalog:
    """The accepted flags of one launcher version, looked up by canonical name or alias."""

    def __init__(self, name: str, version: str, flags: Sequence[FlagSpec]) -> None:
        self.name = name
        self.version = version
        self._by_flag = {spec.flag: spec for spec in flags}
        self._by_any = {opt: spec for spec in flags for opt in (spec.flag, *spec.aliases)}

    def __contains__(self, flag: object) -> bool:
        return flag in self._by_any

    def __len__(self) -> int:
        return len(self._by_flag)

    def get(self, flag: str) -> FlagSpec | None:
        """The option for a canonical flag or an alias."""
        return self._by_any.get(flag)

    def canonical(self, flag: str) -> str | None:
        spec = self._by_any.get(flag)
        return spec.flag if spec else None

    def flags(self) -> list[FlagSpec]:
        return list(self._by_flag.values())

    def check(self, argv: Sequence[str]) -> list[FlagProblem]:
        """Problems with `argv` (flags only, no entrypoint); empty when all is accepted."""
        problems: list[FlagProblem] = []
        seen: set[str] = set()
        for flag, values in split_argv(argv):
            problems.extend(self._check_one(flag, values, seen))
        return problems

    def _check_one(self, flag: str, values: list[str], seen: set[str]) -> list[FlagProblem]:
        spec = self._by_any.get(flag)
        if spec is None:
            what = "stray value" if not flag else "unknown flag"
            return [FlagProblem(flag, f"{what} for {self.name} {self.version}", " ".join(values))]
        problems = []
        if flag != spec.flag and not flag.startswith("--no-"):
            problems.append(FlagProblem(flag, f"use the canonical name {spec.flag}"))
        repeatable = spec.kind in {"append", "extend"}
        if spec.flag in seen and not repeatable:
            problems.append(FlagProblem(flag, "given more than once"))
        seen.add(spec.flag)
        if spec.deprecated:
            problems.append(FlagProblem(flag, f"deprecated in {self.name} {self.version}"))
        arity = arity_problem(spec, len(values))
        if arity:
            problems.append(FlagProblem(flag, arity, " ".join(values)))
            return problems
        for value in values:
            message = _value_problem(spec, value)
            if message:
                problems.append(FlagProblem(flag, message, value))
        return problems


def _spec_from_row(row: dict[str, Any]) -> FlagSpec:
    parsed = row.get("choices")
    choices = parsed or _RESOLUTION_CHOICES.get(row["flag"])
    return FlagSpec(
        flag=row["flag"],
        aliases=tuple(row.get("aliases", ())),
        dest=row["dest"],
        kind=row["kind"],
        type=row.get("type"),
        choices=tuple(str(c) for c in choices) if choices is not None else None,
        nargs=row.get("nargs"),
        default=row.get("default"),
        deprecated=bool(row.get("deprecated", False)),
        parser_choices=tuple(str(c) for c in parsed) if parsed else None,
    )


@cache
def _load(filename: str, name: str) -> FlagCatalog:
    data = json.loads((_DIR / filename).read_text())
    return FlagCatalog(name, data["version"], [_spec_from_row(row) for row in data["flags"]])


def sglang_flags(version: str = DEFAULT_SGLANG_VERSION) -> FlagCatalog:
    """SGLang's launch-server flags; `KeyError` for a version Plinth has no catalogue for."""
    if version not in SUPPORTED_SGLANG_VERSIONS:
        raise KeyError(f"no flag catalogue for SGLang {version}")
    return _load(f"sglang-{version}.json", "sglang")


def smg_flags() -> FlagCatalog:
    """The smg router's `smg launch` flags."""
    return _load(f"smg-{SMG_VERSION}.json", "smg")
