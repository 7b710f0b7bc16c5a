"""What a run asks of the tool and how its answers are told back, as plain values: the formats
and recipes a run may ask for (``runtime.quantize``'s types), the tool's JOB.json for a run's
attempt (``job_of``), where its checkpoints are in the model cache, and a candidate's predicted
throughput (``runtime.quantize.price_candidate``) for the frontier.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from deployments.drivers.base import QuantizationJob
from deployments.quantization.models import QuantizationRun
from runtime.catalog.quantization import tool_formats
from runtime.quantize import Job, Recipe, price_candidate
from runtime.spec import MODEL_CACHE_PATH, RuntimeSpec

# The formats the tool makes and SGLang 0.5.23 serves (the quantization catalogue's).
FORMATS = tool_formats()
QUANTIZED_DIR = "plinth-quantized"
SOURCES_DIR = "plinth-sources"
MAX_RECIPES = 8


class RecipeError(ValueError):
    """A recipe the tool would refuse, in words."""


def parse_recipes(value: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``value`` as the tool's recipes (``runtime.quantize.Recipe``), as JSON; RecipeError
    naming the first problem."""
    if not isinstance(value, list) or len(value) > MAX_RECIPES:
        raise RecipeError(f"a list of at most {MAX_RECIPES} recipes")
    out = []
    for index, item in enumerate(value):
        try:
            out.append(Recipe.model_validate(item).model_dump(mode="json"))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise RecipeError(f"[{index}]{'.' + where if where else ''}: {first['msg']}") from None
    names = [r["name"] for r in out]
    if len(set(names)) != len(names):
        raise RecipeError("recipe names must be unique")
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
    spec: dict[str, Any] = {
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
        spec["propose"] = True
    else:
        spec["candidates"] = run.recipes
    job = Job.model_validate(spec).model_dump(mode="json")  # what the tool will accept
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
    """The candidate's predicted throughput per GPU at the default SLO
    (``runtime.quantize.price_candidate``) for the endpoint the run's model came from (its GPU,
    TP, KV cache); None where the run names no endpoint, or the model is one the performance
    model cannot price."""
    deployment = run.source_deployment
    revision = deployment.target_revision if deployment is not None else None
    if revision is None:
        return None
    shares = values.get("format_shares") or values["quantized_fraction"]
    try:
        spec = RuntimeSpec.model_validate(revision.spec)
        price = price_candidate(spec, run.format, shares)
    except (ValueError, LookupError):
        return None
    return {
        "throughput_per_gpu": round(price.tokens_per_s_per_gpu, 1),
        "capacity_rps": round(price.capacity_rps, 3),
        "meets_slo": price.meets_slo,
        "fits": price.fits,
        "bytes_per_weight": round(price.bytes_per_weight, 4),
        "weight_gib_per_gpu": round(price.weight_gib_per_gpu, 3),
    }
