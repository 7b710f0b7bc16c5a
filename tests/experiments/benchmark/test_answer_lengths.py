"""How long a benchmark's answers are: NVIDIA AIPerf for real, against simulated engines behind smg.

Every request asks for the profile's answer length and pins it (``ignore_eos``, ``min_tokens``),
so an engine that honours them, as SGLang does, answers exactly that many tokens even when its
model would end sooner (here it would, almost always: its natural answers average 8 tokens). An
engine that does not honour them (``--sim-ignore-length-pins``) answers shorter, and sometimes
with no text at all; the point then says so: the answers off the asked length are counted and
explained, and an empty answer is counted as one, not as an error as AIPerf counts it.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from deployments.drivers.local.benchmark import run_aiperf
from deployments.drivers.local.tools_env import aiperf_installed
from deployments.experiments.benchmark.aiperf import aiperf_argv, read_export
from deployments.experiments.benchmark.profile import PointResult, TrafficProfile, load_points
from runtime.sim.launcher import SimCluster

PROFILE = TrafficProfile(input_tokens=96, output_tokens=32, concurrency=(8,), duration_s=4)
(POINT,) = load_points(PROFILE)


def _measure(tmp_path: Path, *engine_args: str) -> PointResult:
    """One load point of ``PROFILE`` against one engine started with ``engine_args``."""
    assert aiperf_installed(settings.PLINTH_TOOLS_DIR), (
        "run `python -m deployments.drivers.local.tools_env`"
    )
    out = tmp_path / "aiperf"
    with SimCluster(engines=1, policy="round_robin", engine_args=engine_args) as cluster:
        argv = aiperf_argv(
            PROFILE, POINT, url=cluster.url, model=cluster.model, api_key="unused",
            artifact_dir=str(out),
        )  # fmt: skip
        tools = Path(settings.PLINTH_TOOLS_DIR)
        export = run_aiperf(argv, out, tools_dir=tools, timeout_s=240)
    return read_export(export.parent, POINT, output_tokens=PROFILE.output_tokens)


def test_an_engine_that_honours_the_pins_answers_the_asked_length(tmp_path: Path) -> None:
    point = _measure(tmp_path, "--sim-output-len-mean", "8")
    assert point.requests > 0 and point.errors == 0 and point.error_summary == []
    assert point.output_tokens_requested == 32
    assert point.output_tokens_mean == point.output_tokens_min == 32
    assert point.off_length_answers == point.empty_answers == 0 and point.notes == []


def test_short_and_empty_answers_are_counted_and_explained_not_called_errors(
    tmp_path: Path,
) -> None:
    point = _measure(tmp_path, "--sim-output-len-mean", "1", "--sim-ignore-length-pins", "1")
    # An answer with no text is the engine's valid answer: AIPerf calls it an error.
    assert point.empty_answers > 0 and point.errors == 0 and point.error_summary == []
    assert point.requests > 0 and point.off_length_answers == point.requests
    assert point.output_tokens_min < point.output_tokens_mean < point.output_tokens_requested
    off_length, empty = point.notes
    assert f"{point.off_length_answers} of {point.requests} answers were not the 32" in off_length
    assert f"{point.empty_answers} answers had no text" in empty
    assert "not errors" in empty
