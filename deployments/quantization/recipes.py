"""What a run asks of the tool and how its answers are told back, as plain values: the formats
and recipes a run may ask for (``runtime.quantize``'s types), the tool's JOB.json for a run's
attempt (``job_of``), where its checkpoints are in the model cache, and a candidate's predicted
throughput (``runtime.quantize.price_candidate``) for the frontier.
"""

from __future__ import annotations

from typing import Any

from deployments.drivers.base import QuantizationJob
from deployments.quantization.models import QuantizationRun
from runtime.spec import MODEL_CACHE_PATH

# The formats llmcompressor makes and SGLang 0.5.23 serves (tools/quantize's contract).
FORMATS = ("fp8", "nvfp4", "w4a16", "w8a8_int8")
QUANTIZED_DIR = "plinth-quantized"
SOURCES_DIR = "plinth-sources"
MAX_RECIPES = 8


class RecipeError(ValueError):
    """A recipe the tool would refuse, in words."""


def parse_recipes(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``value`` as the tool's RECIPE objects: a name, module patterns kept in BF16, per-pattern
    formats; RecipeError naming the first problem."""
    if not isinstance(value, list) or len(value) > MAX_RECIPES:
        raise RecipeError(f"a list of at most {MAX_RECIPES} recipes")
    seen: set[str] = set()
    out = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise RecipeError(f"[{index}] is not an object")
        name = item.get("name")
        if not isinstance(name, str) or not name.strip() or len(name) > 100 or name in seen:
            raise RecipeError(f"[{index}].name must be a unique name of 1-100 characters")
        keep = item.get("keep_bf16", [])
        if not isinstance(keep, list) or not all(isinstance(k, str) and k for k in keep):
            raise RecipeError(f"[{index}].keep_bf16 must be a list of module patterns")
        formats = item.get("formats", {})
        if not isinstance(formats, dict) or any(f not in FORMATS for f in formats.values()):
            raise RecipeError(f"[{index}].formats maps module patterns to {', '.join(FORMATS)}")
        extra = set(item) - {"name", "keep_bf16", "formats"}
        if extra:
            raise RecipeError(f"[{index}] has unknown fields {sorted(extra)}")
        seen.add(name)
        out.append({"name": name, "keep_bf16": list(keep), "formats": dict(formats)})
    return out


def output_dir(run: QuantizationRun) -> str:
    """Where the run's checkpoints go, under the model cache."""
    return f"{MODEL_CACHE_PATH}/{QUANTIZED_DIR}/{run.pk}"


def source_path(run: QuantizationRun) -> str:
    """The source checkpoint as the tool reads it: a cache path as is; a hub repository
    downloaded beside the quantized checkpoints first."""
    if run.source_model.startswith(MODEL_CACHE_PATH + "/"):
        return run.source_model
    return f"{MODEL_CACHE_PATH}/{SOURCES_DIR}/{run.source_model}"


def cache_path_of(checkpoint: str, seen_output: str, output: str) -> str:
    """``checkpoint`` (a path as the tool saw it) as a model cache path: what lies under the
    attempt's output folder as seen there lies under ``output`` in the cache."""
    seen = seen_output.rstrip("/")
    if seen and checkpoint.startswith(seen + "/"):
        return output + checkpoint[len(seen) :]
    return f"{output}/{checkpoint.rstrip('/').rsplit('/', 1)[-1]}"


def job_of(run: QuantizationRun, *, namespace: str, hf_token: str | None) -> QuantizationJob:
    """The attempt ``run.attempt`` of ``run`` as a driver starts it."""
    calibration = run.calibration_set
    job: dict[str, Any] = {
        "source_path": source_path(run),
        "format": run.format,
        "calibration": {
            "path": None,
            "samples": run.calibration_samples,
            "max_seq_len": run.max_seq_len,
        },
        "eval": {"path": None, "samples": 16},
        "output_dir": output_dir(run),
    }
    if run.propose:
        job["propose"] = True
    else:
        job["candidates"] = run.recipes
    hub = "" if run.source_model.startswith(MODEL_CACHE_PATH + "/") else run.source_model
    return QuantizationJob(
        run_id=str(run.pk),
        attempt=run.attempt,
        namespace=namespace,
        job=job,
        gpu=run.gpu,
        gpus=run.gpus,
        calibration=tuple(calibration.texts) if calibration is not None else (),
        source_repo=hub,
        hf_token=hf_token,
    )


def price_of_candidate(run: QuantizationRun, values: dict[str, Any]) -> dict[str, Any] | None:
    """The candidate's predicted throughput per GPU (``runtime.quantize.price_candidate``),
    None where no spec prices it (a source named without an endpoint)."""
    return None
