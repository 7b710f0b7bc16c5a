"""Issues read in words people know (Issue 18): a message or fix names a field by what the form
calls it ("draft model"), never by its spec path (``speculator.draft_model``), and a plain
engine's memory findings carry no ``engine:`` prefix. The ``field`` stays the machine's path."""

from __future__ import annotations

import re

import pytest

from runtime.issues import FIELD_WORDS, error, plain
from runtime.validate import check
from tests.runtime.conftest import SpecData
from tests.runtime.test_validate_table import CASES

_PATHS = re.compile("|".join(re.escape(p) for p in sorted(FIELD_WORDS, key=len, reverse=True)))


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_no_issue_names_a_field_by_its_path(case: object, spec_data: SpecData) -> None:
    _, issues = check(spec_data(**case.overrides))  # type: ignore[attr-defined]
    for issue in issues:
        for text in (issue.message, issue.fix or ""):
            assert not _PATHS.search(text), (issue.field, text)
            assert not text.startswith(("engine:", "engine ")), (issue.field, text)


def test_the_field_keeps_its_path_and_the_text_gets_the_words() -> None:
    issue = error(
        "speculator.draft_model", "x", "needs one", "set speculator.draft_model, or use NGRAM"
    )
    assert issue.field == "speculator.draft_model"
    assert issue.fix == "set draft model, or use NGRAM"


def test_model_ids_and_unknown_paths_are_left_alone() -> None:
    text = "meta-llama/Llama-3.1-8B-Instruct on runtime.extra_flags.foo; parallelism.tp 2"
    assert plain(text) == (
        "meta-llama/Llama-3.1-8B-Instruct on runtime.extra_flags.foo; tensor parallel size (TP) 2"
    )


def test_a_memory_finding_of_a_plain_engine_has_no_role_prefix(spec_data: SpecData) -> None:
    _, issues = check(spec_data(model={"source": "meta-llama/Llama-3.1-405B-Instruct"}))
    weights = next(i for i in issues if i.code == "memory_weights_exceed")
    assert weights.message.startswith("weights need ")
    assert "use TP 16" in (weights.fix or "")


def test_split_pools_still_say_which_pool(spec_data: SpecData) -> None:
    _, issues = check(
        spec_data(
            model={"source": "meta-llama/Llama-3.1-70B-Instruct"},
            disaggregation={"enabled": True},
        )
    )
    pooled = [i for i in issues if i.code.startswith("memory_")]
    assert pooled and all(i.message.startswith(("prefill pool: ", "decode pool: ")) for i in pooled)
