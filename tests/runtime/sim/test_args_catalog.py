"""The simulated engine's parser is built from SGLang's flag catalogue, not a copy of it.

Plinth checks a plan's argv against ``runtime.catalog``; the simulator must refuse and accept
exactly the same values, so the catalogue is the one source of each flag's names, default and
choices (a hand-kept list drifts the day the catalogue is regenerated).
"""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.catalog import FlagCatalog, sglang_flags
from runtime.sim.args import (
    MODELLED_FLAGS,
    EngineArgs,
    StartupError,
    build_parser,
    check_engine_args,
    parse_engine_args,
)

CATALOG = sglang_flags()
WITH_CHOICES = [
    (spec.flag, choice)
    for spec in map(CATALOG.get, MODELLED_FLAGS)
    if spec is not None
    for choice in spec.parser_choices or ()
]


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.option_strings[0]: action for action in parser._actions if action.option_strings}


def _parse(*flags: str) -> EngineArgs:
    return parse_engine_args(["--model-path", "m", *flags], env={}, warn=lambda _: None)


def test_every_modelled_flag_is_the_catalogues_flag() -> None:
    actions = _actions(build_parser())
    for flag in MODELLED_FLAGS:
        spec = CATALOG.get(flag)
        assert spec is not None and spec.flag == flag, f"{flag} is not canonical in the catalogue"
        action = actions[flag]
        assert tuple(action.option_strings) == (spec.flag, *spec.aliases)
        assert action.dest == spec.dest
        assert action.default == spec.default
        assert (tuple(action.choices) if action.choices else None) == spec.parser_choices


def test_a_choice_the_catalogue_gains_is_accepted_by_the_simulator() -> None:
    dtype = CATALOG.get("--dtype")
    assert dtype is not None and dtype.parser_choices is not None
    grown = dataclasses.replace(
        dtype,
        choices=(*dtype.parser_choices, "float8_next"),
        parser_choices=(*dtype.parser_choices, "float8_next"),
    )
    others = [spec for spec in CATALOG.flags() if spec.flag != "--dtype"]
    catalog = FlagCatalog("sglang", CATALOG.version, [*others, grown])
    namespace, _ = build_parser(catalog).parse_known_args(["--dtype", "float8_next"])
    assert namespace.dtype == "float8_next"


@given(st.sampled_from(WITH_CHOICES))
def test_every_catalogue_choice_parses(pair: tuple[str, str]) -> None:
    flag, choice = pair
    spec = CATALOG.get(flag)
    assert spec is not None
    # A flag taking several values (--lora-target-modules) parses one choice as a list of one.
    expected = [choice] if spec.nargs in ("*", "+") else choice
    assert getattr(_parse(flag, choice), spec.dest) == expected


@given(
    st.sampled_from([flag for flag, _ in WITH_CHOICES]),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=12),
)
def test_a_value_outside_the_catalogues_choices_exits_2(flag: str, value: str) -> None:
    spec = CATALOG.get(flag)
    assert spec is not None and spec.parser_choices is not None
    if value in spec.parser_choices or value.startswith("-"):
        return  # a valid choice, or argparse would read it as a flag
    with pytest.raises(SystemExit) as exc:
        _parse(flag, value)
    assert exc.value.code == 2


def test_speculative_algorithms_are_the_catalogues_start_up_choices() -> None:
    spec = CATALOG.get("--speculative-algorithm")
    assert spec is not None and spec.choices and spec.parser_choices is None  # checked at start
    for algorithm in spec.choices:
        check_engine_args(_parse("--speculative-algorithm", algorithm))
    with pytest.raises(StartupError, match="Unknown speculative algorithm"):
        check_engine_args(_parse("--speculative-algorithm", "MAGIC"))
