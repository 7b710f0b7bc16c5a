"""``plinth quantize``: make a quantized checkpoint of a model in the platform, watch the run,
compare its candidates (KL against the original, predicted throughput), deploy one as a canary
gated by KL or as a new revision; the quantized models; calibration samples."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from plinth.cli.output import Output, OutputOpt, open_client, show

quantize_app = typer.Typer(
    help="Quantization: recipes searched by KL against the original, deployed as revisions.",
    no_args_is_help=True,
)
RUN_COLUMNS = ["id", "status", "phase", "phase_candidate", "source_model", "format", "attempt",
               "gpu_seconds", "error"]  # fmt: skip
CANDIDATE_COLUMNS = ["name", "mean_kl", "top1", "quantized_fraction", "bits_per_weight",
                     "on_frontier", "artifact"]  # fmt: skip
RunId = Annotated[str, typer.Argument(help="the run's id")]


@quantize_app.command("start")
def quantize_start(
    format: Annotated[str, typer.Option("--format", help="fp8, nvfp4, w4a16 or w8a8_int8")],
    endpoint: Annotated[
        str | None, typer.Option("--endpoint", "-e", help="quantize this endpoint's model")
    ] = None,
    model: Annotated[str, typer.Option("--model", help="or a model cache path / hub id")] = "",
    recipes: Annotated[
        Path | None, typer.Option("--recipes", help="a JSON file of recipes; default: proposed")
    ] = None,
    calibration_set: Annotated[str | None, typer.Option("--calibration-set")] = None,
    samples: Annotated[int, typer.Option(help="calibration samples")] = 64,
    max_seq_len: Annotated[int, typer.Option("--max-seq-len", help="tokens per sample")] = 512,
    gpu: Annotated[str, typer.Option(help="GPU type (default: the endpoint's)")] = "",
    name: Annotated[str, typer.Option()] = "",
    output: OutputOpt = Output.table,
) -> None:
    """Start a quantization run.

    Example: plinth quantize start --endpoint llama-chat --format fp8
    """
    asked = json.loads(recipes.read_text()) if recipes else None
    with open_client() as client:
        run = client.quantization.start(
            format=format, source_model=model, endpoint=endpoint, recipes=asked,
            propose=asked is None, calibration_set=calibration_set, samples=samples,
            max_seq_len=max_seq_len, gpu=gpu, name=name,
        )  # fmt: skip
        show(run, output, RUN_COLUMNS)


@quantize_app.command("list")
def quantize_list(output: OutputOpt = Output.table) -> None:
    """The organization's quantization runs, newest first.

    Example: plinth quantize list
    """
    with open_client() as client:
        show(list(client.quantization.list()), output, RUN_COLUMNS)


@quantize_app.command("status")
def quantize_status(
    run_id: RunId,
    wait: Annotated[bool, typer.Option("--wait", help="until the run ends")] = False,
    output: OutputOpt = Output.table,
) -> None:
    """A run's progress and its candidates (closest to the original first).

    Example: plinth quantize status 3f2a... --wait
    """
    with open_client() as client:
        run = client.quantization.get(run_id)
        while wait and run.status in ("queued", "running"):
            typer.echo(f"{run.status}: {run.phase} {run.phase_candidate}".rstrip(), err=True)
            time.sleep(3)
            run = client.quantization.get(run_id)
        show(run, output, RUN_COLUMNS)
        if output is Output.table and run.candidates:
            typer.echo("")
            show(run.candidates, output, CANDIDATE_COLUMNS)


@quantize_app.command("compare")
def quantize_compare(run_id: RunId, output: OutputOpt = Output.table) -> None:
    """Each candidate against the all-layers recipe: KL, top-1, throughput, the frontier.

    Example: plinth quantize compare 3f2a...
    """
    with open_client() as client:
        compared = client.quantization.compare(run_id)
        show(compared.candidates, output)


@quantize_app.command("deploy")
def quantize_deploy(
    run_id: RunId,
    candidate: Annotated[str, typer.Argument(help="the candidate's (recipe's) name")],
    endpoint: Annotated[str, typer.Option("--endpoint", "-e", help="the endpoint's slug")],
    revision: Annotated[
        bool, typer.Option("--revision", help="a new revision, without the canary and its gate")
    ] = False,
    weight: Annotated[int, typer.Option("--weight", "-w", help="canary percent")] = 10,
    output: OutputOpt = Output.table,
) -> None:
    """Deploy a candidate: a canary gated by KL (promote it once the gate passed), or a revision.

    Example: plinth quantize deploy 3f2a... keep-sensitive -e llama-chat
    """
    mode = "revision" if revision else "canary"
    with open_client() as client:
        done = client.quantization.deploy(
            run_id, candidate, endpoint=endpoint, mode=mode, weight=weight
        )
        show(done, output)


@quantize_app.command("models")
def quantize_models(output: OutputOpt = Output.table) -> None:
    """Quantized checkpoints with their provenance (source, tool, recipe, calibration, KL).

    Example: plinth quantize models -o json
    """
    with open_client() as client:
        columns = ["path", "quantization", "source_model", "candidate", "mean_kl", "run"]
        show(list(client.quantization.artifacts()), output, columns)


@quantize_app.command("calibration")
def quantize_calibration(
    name: Annotated[str, typer.Argument()],
    file: Annotated[Path, typer.Argument(help='JSONL, one {"text": ...} per line')],
    retention_days: Annotated[int, typer.Option("--retention-days")] = 30,
    output: OutputOpt = Output.table,
) -> None:
    """Upload calibration samples (deleted after their retention).

    Example: plinth quantize calibration support-chats samples.jsonl --retention-days 7
    """
    texts = [json.loads(line)["text"] for line in file.read_text().splitlines() if line.strip()]
    with open_client() as client:
        made = client.quantization.upload_calibration(name, texts, retention_days=retention_days)
        show(made, output)
