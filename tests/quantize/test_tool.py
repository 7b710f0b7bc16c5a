"""The quantization tool for real: llmcompressor, in its own virtualenv, on a small model.

One module-scoped run: ``make_model.py`` builds a four-block Llama-architecture checkpoint with
random weights (one block given outlier activation channels; its docstring says why that is
fair), then the job runner searches INT8 W8A8 recipes on it as a subprocess, exactly as the
platform starts it: per-layer sensitivity, the proposed candidates quantized by the library,
real KL between real logits before and after (runtime.quality's math), compressed-tensors
checkpoints on disk. The tests read what it printed and wrote. Torch stays on the CPU with one
thread (a 2-core machine shared with the rest of the suite: more threads only contend).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.quantize import (
    CandidateEvent,
    DoneEvent,
    ErrorEvent,
    PhaseEvent,
    SensitivityEvent,
    parse_event,
    price_candidate,
)
from runtime.spec import RuntimeSpec
from tests.quantize.conftest import tool_env, tool_python

OUTLIER_BLOCK = "model.layers.2"  # make_model.OUTLIER_BLOCK
FORMAT = "w8a8_int8"
# Where the frontier is priced: the small model stands in for a Llama-3.1-8B fine-tune; its
# recipes' weight shares are priced on that model's shape, one H100, default traffic and SLO.
PRICED = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}


def run_tool(python: str, job: dict[str, Any], folder: Path) -> subprocess.CompletedProcess[str]:
    path = folder / "job.json"
    path.write_text(json.dumps(job))
    return subprocess.run(
        [python, "-m", "plinth_quantize", "run", "--job", str(path)],
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=280,
    )


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory, small_model: Path) -> dict[str, Any]:
    """One proposed search over the small model, run through the tool."""
    python, folder, source = tool_python(), tmp_path_factory.mktemp("quantize"), small_model
    job = {
        "source_path": str(source),
        "format": FORMAT,
        "propose": True,
        "calibration": {"path": None, "samples": 4, "max_seq_len": 48},
        "eval": {"path": None, "samples": 8},
        "output_dir": str(folder / "out"),
    }
    done = run_tool(python, job, folder)
    sys.stderr.write(done.stderr[-4000:])
    events = [parse_event(line) for line in done.stdout.splitlines()]
    return {"rc": done.returncode, "events": events, "python": python, "source": source}


def candidates(search: dict[str, Any]) -> dict[str, CandidateEvent]:
    return {e.name: e for e in search["events"] if isinstance(e, CandidateEvent)}


def test_the_job_prints_only_events_and_ends_done(search: dict[str, Any]) -> None:
    events = search["events"]
    assert search["rc"] == 0
    assert isinstance(events[0], PhaseEvent) and events[0].phase == "loading"
    assert isinstance(events[-1], DoneEvent)
    phases = {e.phase for e in events if isinstance(e, PhaseEvent)}
    assert {"loading", "sensitivity", "quantizing", "evaluating", "exporting"} <= phases
    made = candidates(search)
    assert {"all-layers", "keep-1-most-sensitive", "attention-only", "mlp-only"} <= set(made)
    for event in made.values():
        assert event.quantization == "compressed-tensors"
        assert event.tool.name == "llmcompressor" and event.tool.version == "0.14.0.1"
        assert len(event.calibration_sha256) == 64


def test_per_layer_sensitivity_finds_the_block_with_outliers(search: dict[str, Any]) -> None:
    (sensitivity,) = [e for e in search["events"] if isinstance(e, SensitivityEvent)]
    kls = {layer.name: layer.kl for layer in sensitivity.layers}
    assert len(kls) == 4 and all(kl > 0 for kl in kls.values())
    assert max(kls, key=kls.__getitem__) == OUTLIER_BLOCK
    others = [kl for name, kl in kls.items() if name != OUTLIER_BLOCK]
    assert kls[OUTLIER_BLOCK] > 2 * max(others)
    assert candidates(search)["keep-1-most-sensitive"].recipe.keep_bf16 == [f"{OUTLIER_BLOCK}.*"]


def test_the_search_beats_all_layers_on_kl_at_the_same_throughput(search: dict[str, Any]) -> None:
    """Keeping the sensitive block in BF16 beats quantizing every layer on measured KL (at a
    small price in throughput); quantizing it at FP8 instead, which weighs the same as INT8,
    beats it too at the same predicted throughput per GPU."""
    made, spec = candidates(search), RuntimeSpec.model_validate(PRICED)
    every = made["all-layers"]
    price = {
        name: price_candidate(spec, FORMAT, event.format_shares).tokens_per_s_per_gpu
        for name, event in made.items()
    }
    kept, sibling = made["keep-1-most-sensitive"], made["1-most-sensitive-at-fp8"]
    assert kept.mean_kl < every.mean_kl / 2 and kept.top1 > every.top1
    assert price["keep-1-most-sensitive"] <= price["all-layers"]
    assert sibling.mean_kl < every.mean_kl
    assert sibling.quantized_fraction == pytest.approx(1.0)
    assert price["1-most-sensitive-at-fp8"] >= price["all-layers"]
    # Which block is kept matters: the first and last blocks kept cost more and save less.
    assert made["keep-first-last"].mean_kl > kept.mean_kl
    assert price["keep-first-last"] <= price["keep-1-most-sensitive"]


def test_each_candidate_is_a_compressed_tensors_checkpoint(search: dict[str, Any]) -> None:
    for event in candidates(search).values():
        folder = Path(event.checkpoint)
        config = json.loads((folder / "config.json").read_text())
        quant = config["quantization_config"]
        assert quant["quant_method"] == "compressed-tensors"
        assert list(folder.glob("*.safetensors"))
        assert (folder / "tokenizer.json").exists()
    kept = json.loads(
        (Path(candidates(search)["keep-1-most-sensitive"].checkpoint) / "config.json").read_text()
    )
    ignored = kept["quantization_config"]["ignore"]
    assert "lm_head" in ignored
    assert any(name.startswith(OUTLIER_BLOCK + ".") for name in ignored)


def test_a_mixed_precision_checkpoint_loads_back_with_transformers(search: dict[str, Any]) -> None:
    mixed = Path(candidates(search)["1-most-sensitive-at-fp8"].checkpoint)
    script = Path(__file__).with_name("reload_checkpoint.py")
    done = subprocess.run(
        [search["python"], str(script), str(search["source"]), str(mixed)],
        capture_output=True,
        text=True,
        env=tool_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    kl = json.loads(done.stdout.splitlines()[-1])["kl"]
    assert 0 < kl < 0.05  # quantized, and still the model (all-layers INT8 measures ~0.01)


def test_a_bad_job_answers_with_an_error_event(search: dict[str, Any], tmp_path: Path) -> None:
    done = run_tool(search["python"], {"source_path": "/nowhere", "format": "int3"}, tmp_path)
    assert done.returncode != 0
    (event,) = [parse_event(line) for line in done.stdout.splitlines()]
    assert isinstance(event, ErrorEvent)
    assert "format" in event.message and "output_dir" in event.message
