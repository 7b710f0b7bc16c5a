"""``plinth gate``: a canary's revision scored against its baseline (KL divergence), the
verdict and every prompt's figures, and an admin's override."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from plinth.cli.output import (
    EXIT_NOT_FOUND,
    Endpoint,
    Output,
    OutputOpt,
    open_client,
    plain,
    show,
)
from plinth.client import Plinth

gate_app = typer.Typer(
    help="Quality gates: a canary's revision scored against its baseline (KL divergence); "
    "the canary is promoted only once its gate passes.",
    no_args_is_help=True,
)

GATE_COLUMNS = [
    "id",
    "revision",
    "baseline_revision",
    "status",
    "prompt_set",
    "prompts",
    "mean_kl",
    "top1_agreement",
    "created_at",
]
# A gate's figures, read from its results, shown after its own fields.
GATE_FIGURES = ["mean_kl", "p99_kl", "top1_agreement", "prompt_mean_kl_p99", "tokens", "reasons"]
# What a gate was asked to do: shown when it is queued.
GATE_REQUEST = [
    "id",
    "revision",
    "baseline_revision",
    "status",
    "max_mean_kl",
    "min_top1_agreement",
    "max_new_tokens",
    "prompt_set",
    "prompts",
]
GATE_RECORD = [
    *GATE_REQUEST,
    *GATE_FIGURES,
    "error",
    "override_reason",
    "overridden_by",
    "created_by",
    "created_at",
    "finished_at",
]
RevisionOpt = Annotated[
    int | None, typer.Option("--revision", "-r", help="default: the running canary's")
]


def _gate_row(gate: Any) -> dict[str, Any]:
    """A gate's fields with its figures beside them (blank until it ran)."""
    data = plain(gate)
    results = data.get("results") or {}
    figures = {k: results.get(k) for k in GATE_FIGURES}
    figures["reasons"] = "; ".join(results.get("reasons") or [])
    return {**data, **figures}


def _canary_revision(client: Plinth, endpoint: str) -> int:
    """The revision of the endpoint's running canary: what a gate is run on."""
    canary = client.canaries.get(endpoint)
    if canary.status != "running":
        raise typer.BadParameter(
            f"{endpoint} runs no canary now (its last one was {canary.status}); name a revision",
            param_hint="--revision",
        )
    return canary.revision


@gate_app.command("run")
def gate_run(
    endpoint: Endpoint,
    revision: RevisionOpt = None,
    max_mean_kl: Annotated[
        float | None, typer.Option(help="pass at or below this mean KL, nats (0.05)")
    ] = None,
    min_top1_agreement: Annotated[
        float | None, typer.Option(help="pass at or above this top-1 agreement (0.95)")
    ] = None,
    prompts: Annotated[
        Path | None,
        typer.Option(help='your prompt set: JSONL, one {"prompt": ...} a line; default built-in'),
    ] = None,
    max_new_tokens: Annotated[
        int | None, typer.Option(help="tokens of each baseline answer scored (64)")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Score a canary's revision against its baseline (KL divergence over the baseline's
    answers); it runs in the background, and the canary is promoted only once it passes.

    Example: plinth gate run llama-chat --max-mean-kl 0.03 --prompts evals.jsonl
    """
    prompts_jsonl = prompts.read_text(encoding="utf-8") if prompts is not None else ""
    with open_client() as client:
        number = revision if revision is not None else _canary_revision(client, endpoint)
        gate = client.gates.run(
            endpoint,
            number,
            max_mean_kl=max_mean_kl,
            min_top1_agreement=min_top1_agreement,
            prompts_jsonl=prompts_jsonl,
            max_new_tokens=max_new_tokens,
        )
    show(gate, output, GATE_REQUEST)


@gate_app.command("list")
def gate_list(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """An endpoint's gate runs, of every revision, newest first, with their figures.

    Example: plinth gate list llama-chat
    """
    with open_client() as client:
        gates = list(client.gates.list(endpoint))
    if output is not Output.table:
        show(gates, output)
        return
    show([_gate_row(g) for g in gates], output, GATE_COLUMNS)


def _prompt_rows(gate: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per scored prompt: its figures and the start of its text."""
    rows = []
    for scored in (gate.get("results") or {}).get("per_prompt") or []:
        text = " ".join(str(scored.get("prompt", "")).split())
        rows.append(
            {
                "#": scored.get("index"),
                "tokens": scored.get("tokens"),
                "mean_kl": scored.get("mean_kl"),
                "p99_kl": scored.get("p99_kl"),
                "top1_agreement": scored.get("top1_agreement"),
                "prompt": text if len(text) <= 60 else text[:59] + "…",
            }
        )
    return rows


@gate_app.command("show")
def gate_show(
    endpoint: Endpoint,
    revision: Annotated[
        int | None, typer.Option("--revision", "-r", help="default: the latest gate run's")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """A revision's gate (its latest run): thresholds, verdict, figures and every prompt's.

    Example: plinth gate show llama-chat -r 2
    """
    with open_client() as client:
        if revision is None:
            latest = next(iter(client.gates.list(endpoint, page_size=1)), None)
            if latest is None:
                typer.echo(f"error: {endpoint} has no quality gate runs", err=True)
                raise typer.Exit(EXIT_NOT_FOUND)
            revision = latest.revision
        gate = client.gates.get(endpoint, revision)
    if output is not Output.table:
        show(gate, output)
        return
    row = _gate_row(gate)
    show(row, output, GATE_RECORD)
    prompts = _prompt_rows(row)
    if prompts:
        typer.echo("")
        show(prompts, output)


@gate_app.command("override")
def gate_override(
    endpoint: Endpoint,
    revision: Annotated[int, typer.Option("--revision", "-r", help="the gated revision")],
    reason: Annotated[str, typer.Option(help="why it may serve anyway (audited)")],
    output: OutputOpt = Output.table,
) -> None:
    """Admins: let a revision whose gate failed (or could not run) be promoted, with a reason.

    Example: plinth gate override llama-chat -r 2 --reason "reviewed the worst prompts"
    """
    with open_client() as client:
        gate = client.gates.override(endpoint, revision, reason=reason)
    show(gate, output, ["id", "revision", "status", "override_reason", "overridden_by"])
