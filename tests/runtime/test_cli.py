"""`python -m runtime validate|plan|estimate`: readable output and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.__main__ import main

GOLDEN = Path(__file__).parent / "golden"
EIGHT_B = GOLDEN / "llama-3.1-8b-h100.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def test_validate_clean_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(EIGHT_B)]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out


def test_validate_reports_field_reason_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _write(
        tmp_path,
        "model: {source: meta-llama/Llama-3.1-70B-Instruct}\n"
        "hardware: {gpu: H100-SXM}\nparallelism: {tp: 3}\n",
    )
    assert main(["validate", str(spec)]) == 1
    out = capsys.readouterr().out
    assert "ERROR   parallelism.tp: TP 3 does not divide the 64 attention heads" in out
    assert "fix: use TP 2, 4 or 8" in out and "[tp_heads_indivisible]" in out


def test_bad_input_is_an_error_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _write(
        tmp_path,
        "model: {source: m, served_name: 'a:b'}\nhardware: {gpu: X1}\n"
        "parallelism: {tp: -2}\nquantization: {method: nvfp4}\n"
        "runtime: {extra_flags: {--disable-cuda-graph: true}}\n",
    )
    assert main(["validate", str(spec)]) == 1
    out = capsys.readouterr().out
    for code in ("served_name_colon", "unknown_gpu", "out_of_range", "unknown_quantization"):
        assert f"[{code}]" in out
    assert "Traceback" not in out


def test_extra_flag_outside_allowlist(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _write(
        tmp_path,
        "model: {source: meta-llama/Llama-3.1-8B-Instruct}\nhardware: {gpu: H100-SXM}\n"
        "runtime: {extra_flags: {--disable-cuda-graph: true}}\n",
    )
    assert main(["validate", str(spec)]) == 1
    assert "[flag_not_allowed]" in capsys.readouterr().out


def test_unreadable_and_malformed_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2
    assert main(["validate", str(_write(tmp_path, "model: [unclosed"))]) == 2
    assert main(["validate", str(_write(tmp_path, "- a list\n"))]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_plan_prints_argv_per_role(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(GOLDEN / "llama-3.1-70b-pd-h100.yaml")]) == 0
    out = capsys.readouterr().out
    assert "# prefill:" in out and "# decode:" in out and "# router:" in out
    assert "    --disaggregation-mode prefill \\" in out
    assert "smg launch \\" in out


def test_plan_refuses_invalid_specs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _write(
        tmp_path,
        "model: {source: meta-llama/Llama-3.1-8B-Instruct}\nhardware: {gpu: H100-SXM}\n"
        "parallelism: {tp: 2, ep: 2}\n",
    )
    assert main(["plan", str(spec)]) == 1
    out = capsys.readouterr().out
    assert "[ep_dense_model]" in out and "launch_server" not in out
    assert main(["plan", str(_write(tmp_path, "model: {source: m}\n"))]) == 1
    assert "[missing_field]" in capsys.readouterr().out


def test_plan_and_estimate_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(EIGHT_B), "--json"]) == 0
    roles = json.loads(capsys.readouterr().out)["roles"]
    assert [r["role"] for r in roles] == ["engine", "router"]
    assert main(["estimate", str(EIGHT_B), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fits"] is True


def test_module_entrypoint_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runtime", "estimate", str(EIGHT_B)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert "weights" in done.stdout and "$2.49" in done.stdout
