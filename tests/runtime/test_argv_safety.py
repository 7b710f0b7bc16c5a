"""Argv injection through spec fields is refused at validation, and the builder refuses it again.

Issue 12 item 1: a list value in `runtime.extra_flags` put any SGLang flag on the engine's command
line. The class is any spec string that reaches an argv: each such field is refused, naming the
field, when its value would parse as a flag, holds a control character, or (model sources) points
anywhere but a repository id or the model cache. `runtime.launch` refuses to emit such a token even
when handed a spec that skipped validation (`model_copy` does not validate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.__main__ import main
from runtime.argv import UnsafeArgvError, parses_as_flag
from runtime.catalog import sglang_flags
from runtime.extra_flags import EXTRA_FLAG_ALLOWLIST, EXTRA_FLAG_DENYLIST, flag_argv
from runtime.launch import plan, refuse_unsafe_args, with_flag
from runtime.spec import RuntimeSpec
from runtime.validate import check
from tests.runtime.conftest import MINIMAL, SpecData, merge

ISSUE_REPRO = {
    "runtime": {
        "extra_flags": {
            "--reasoning-parser": [
                "deepseek-r1",
                "--enable-custom-logit-processor",
                "--trust-remote-code",
            ]
        }
    }
}

# (overrides, field the error must name, code)
REFUSED: list[tuple[dict[str, Any], str, str]] = [
    (ISSUE_REPRO, "runtime.extra_flags.--reasoning-parser", "invalid_type"),
    ({"runtime": {"extra_flags": {"--log-level": "--trust-remote-code"}}},
     "runtime.extra_flags.--log-level", "unsafe_value"),
    ({"runtime": {"extra_flags": {"--log-level": "info\n--trust-remote-code"}}},
     "runtime.extra_flags.--log-level", "unsafe_value"),
    ({"runtime": {"extra_flags": {"--watchdog-timeout": "-5"}}},
     "runtime.extra_flags.--watchdog-timeout", "unsafe_value"),
    ({"runtime": {"extra_flags": {"--watchdog-timeout": True}}},
     "runtime.extra_flags.--watchdog-timeout", "flag_invalid_value"),
    ({"runtime": {"extra_flags": {"--enable-torch-compile": "yes"}}},
     "runtime.extra_flags.--enable-torch-compile", "flag_invalid_value"),
    ({"runtime": {"extra_flags": {"--reasoning-parser": "no-such-parser"}}},
     "runtime.extra_flags.--reasoning-parser", "flag_invalid_value"),
    ({"runtime": {"extra_flags": {"--chat-template": "/etc/passwd"}}},
     "runtime.extra_flags.--chat-template", "flag_refused"),
    ({"runtime": {"extra_flags": {"--download-dir": "/"}}},
     "runtime.extra_flags.--download-dir", "flag_refused"),
    ({"runtime": {"extra_flags": {"--enable-custom-logit-processor": True}}},
     "runtime.extra_flags.--enable-custom-logit-processor", "flag_refused"),
    ({"runtime": {"extra_flags": {"--trust-remote-code": True}}},
     "runtime.extra_flags.--trust-remote-code", "flag_refused"),
    ({"runtime": {"extra_flags": {"--load-format": "pt"}}},
     "runtime.extra_flags.--load-format", "flag_refused"),
    ({"runtime": {"extra_flags": {"--reasoning-parser deepseek-r1 --trust-remote-code": True}}},
     "runtime.extra_flags.--reasoning-parser deepseek-r1 --trust-remote-code", "flag_unknown"),
    ({"model": {"source": "--trust-remote-code"}}, "model.source", "invalid_model_source"),
    ({"model": {"source": "/etc/passwd"}}, "model.source", "invalid_model_source"),
    ({"model": {"source": "../../etc"}}, "model.source", "invalid_model_source"),
    ({"model": {"source": "/root/.cache/huggingface/../../etc"}},
     "model.source", "invalid_model_source"),
    ({"model": {"source": "s3://bucket/weights"}}, "model.source", "invalid_model_source"),
    ({"model": {"source": "org/name\n"}}, "model.source", "invalid_model_source"),
    ({"model": {"source": "org/na\x00me"}}, "model.source", "invalid_model_source"),
    ({"model": {"source": "org/name --trust-remote-code"}}, "model.source", "invalid_model_source"),
    ({"model": {"source": MINIMAL["model"]["source"], "revision": "--trust-remote-code"}},
     "model.revision", "invalid_revision"),
    ({"model": {"source": MINIMAL["model"]["source"], "revision": "main\n"}},
     "model.revision", "invalid_revision"),
    ({"model": {"source": MINIMAL["model"]["source"], "revision": "../../x"}},
     "model.revision", "invalid_revision"),
    ({"model": {"source": MINIMAL["model"]["source"], "served_name": "-x"}},
     "model.served_name", "unsafe_value"),
    ({"model": {"source": MINIMAL["model"]["source"], "served_name": "chat\r\nX-Injected: 1"}},
     "model.served_name", "unsafe_value"),
    ({"model": {"source": MINIMAL["model"]["source"], "served_name": "chat\u202e"}},
     "model.served_name", "unsafe_value"),
    ({"speculator": {"algorithm": "EAGLE3", "draft_model": "/etc"}},
     "speculator.draft_model", "invalid_model_source"),
    ({"speculator": {"algorithm": "EAGLE3", "draft_model": "a/b", "draft_model_revision": "-r"}},
     "speculator.draft_model_revision", "invalid_revision"),
    ({"disaggregation": {"enabled": True, "ib_device": "mlx5_0 --trust-remote-code"}},
     "disaggregation.ib_device", "invalid_value"),
    ({"disaggregation": {"enabled": True, "ib_device": "--trust-remote-code"}},
     "disaggregation.ib_device", "invalid_value"),
    ({"model": {"source": MINIMAL["model"]["source"], "hf_token_secret": "-s\n"}},
     "model.hf_token_secret", "unsafe_value"),
    ({"runtime": {"env": {"SGLANG_X": "a\x00b"}}}, "runtime.env.SGLANG_X", "unsafe_value"),
    ({"runtime": {"env": {"SGLANG_X\n": "1"}}}, "runtime.env", "invalid_env_name"),
    ({"runtime": {"env": {"HF_HOME": "/"}}}, "runtime.env", "env_name_not_allowed"),
    ({"runtime": {"env": {"TRITON_CACHE_DIR": "/etc"}}}, "runtime.env", "env_name_not_allowed"),
    ({"runtime": {"image": "-x"}}, "runtime.image", "unsafe_value"),
]  # fmt: skip


@pytest.mark.parametrize(("overrides", "field", "code"), REFUSED)
def test_argv_injection_is_refused_naming_the_field(
    spec_data: SpecData, overrides: dict[str, Any], field: str, code: str
) -> None:
    _, issues = check(spec_data(**overrides))
    errors = [(i.field, i.code) for i in issues if i.is_error]
    assert (field, code) in errors, errors
    assert all(i.message and i.fix for i in issues if i.is_error)


ACCEPTED: list[dict[str, Any]] = [
    {"model": {"source": "/root/.cache/huggingface/hub/models--org--m/snapshots/0123abc"}},
    {"model": {"source": "gpt2"}},
    {"model": {"source": MINIMAL["model"]["source"], "revision": "refs/pr/1"}},
    {"batching": {"chunked_prefill_size": -1}},  # a negative number is a value to argparse
    {"runtime": {"extra_flags": {"--reasoning-parser": "deepseek-r1", "--watchdog-timeout": 1.5}}},
    {"runtime": {"env": {"SGLANG_X": "-1"}}},  # env is not argv
]


@pytest.mark.parametrize("overrides", ACCEPTED)
def test_ordinary_values_still_pass(spec_data: SpecData, overrides: dict[str, Any]) -> None:
    spec, issues = check(spec_data(**overrides))
    assert spec is not None
    assert [i for i in issues if i.is_error] == []


def _valid_spec() -> RuntimeSpec:
    spec, issues = check(merge(MINIMAL, {"model": {**MINIMAL["model"], "served_name": "chat"}}))
    assert spec is not None and not [i for i in issues if i.is_error]
    return spec


def _bypassing_validation(spec: RuntimeSpec, group: str, **values: Any) -> RuntimeSpec:
    """`spec` with `values` set in `group` without validation, as a buggy caller could."""
    updated = getattr(spec, group).model_copy(update=values)
    return spec.model_copy(update={group: updated})


@pytest.mark.parametrize(
    ("group", "values"),
    [
        ("runtime", {"extra_flags": ISSUE_REPRO["runtime"]["extra_flags"]}),
        ("runtime", {"extra_flags": {"--enable-custom-logit-processor": True}}),
        ("runtime", {"extra_flags": {"--chat-template": "/etc/passwd"}}),
        ("runtime", {"extra_flags": {"--log-level": "-v"}}),
        ("model", {"served_name": "--trust-remote-code"}),
        ("model", {"source": "org/m\n--trust-remote-code"}),
        ("model", {"revision": "-r"}),
        ("speculator", {"algorithm": "EAGLE3", "draft_model": "--enable-custom-logit-processor"}),
    ],
)
def test_the_builder_refuses_what_validation_would(group: str, values: dict[str, Any]) -> None:
    with pytest.raises(UnsafeArgvError):
        plan(_bypassing_validation(_valid_spec(), group, **values))


def test_the_builder_refuses_unknown_repeated_or_stray_tokens() -> None:
    engines = sglang_flags()
    with pytest.raises(UnsafeArgvError, match="more than once"):
        refuse_unsafe_args("engine", ["--tp-size", "1", "--tp-size", "2"], engines)
    with pytest.raises(UnsafeArgvError, match="not a flag"):
        refuse_unsafe_args("engine", ["--no-such-flag"], engines)
    with pytest.raises(UnsafeArgvError, match="not a flag"):
        refuse_unsafe_args("engine", ["--tp", "2"], engines)  # an abbreviation
    with pytest.raises(UnsafeArgvError, match="not a flag"):
        refuse_unsafe_args("engine", ["stray"], engines)
    with pytest.raises(UnsafeArgvError, match="read as a flag"):
        refuse_unsafe_args("engine", ["--served-model-name", "-x"], engines)
    refuse_unsafe_args("engine", ["--chunked-prefill-size", "-1"], engines)


def test_with_flag_refuses_a_value_that_is_a_flag() -> None:
    with pytest.raises(UnsafeArgvError):
        with_flag(["--port", "1"], "--host", "--trust-remote-code")
    with pytest.raises(UnsafeArgvError):
        with_flag(["--port", "1"], "host", "x")
    with pytest.raises(UnsafeArgvError):
        with_flag(["--port", "1"], "--host", "a\nb")


def test_flag_argv_refuses_lists_and_denied_flags() -> None:
    catalog = sglang_flags()
    with pytest.raises(UnsafeArgvError):
        flag_argv("--reasoning-parser", ["deepseek-r1", "--trust-remote-code"], catalog)  # type: ignore[arg-type]
    with pytest.raises(UnsafeArgvError):
        flag_argv("--download-dir", "/tmp/x", catalog)
    assert flag_argv("--enable-torch-compile", False, catalog) == []
    assert flag_argv("--reasoning-parser", "deepseek-r1", catalog) == [
        "--reasoning-parser",
        "deepseek-r1",
    ]


def test_allowlist_and_denylist_are_canonical_disjoint_single_valued() -> None:
    catalog = sglang_flags()
    assert not EXTRA_FLAG_ALLOWLIST & EXTRA_FLAG_DENYLIST.keys()
    for flag in [*EXTRA_FLAG_ALLOWLIST, *EXTRA_FLAG_DENYLIST]:
        spec = catalog.get(flag)
        assert spec is not None and spec.flag == flag, flag
    for flag in EXTRA_FLAG_ALLOWLIST:
        spec = catalog.get(flag)
        assert spec is not None and (spec.store_true or spec.nargs is None), flag
    assert all(reason.strip() for reason in EXTRA_FLAG_DENYLIST.values())


def test_parses_as_flag_follows_argparse() -> None:
    assert parses_as_flag("--x") and parses_as_flag("-x") and parses_as_flag("-")
    assert not parses_as_flag("-1") and not parses_as_flag("-0.5") and not parses_as_flag("x-")


def test_runtime_plan_refuses_the_issue_repro(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(merge(MINIMAL, ISSUE_REPRO)))
    assert main(["plan", str(path)]) == 1
    out = capsys.readouterr().out
    assert "runtime.extra_flags.--reasoning-parser" in out
    assert "python3 -m" not in out  # no argv printed
