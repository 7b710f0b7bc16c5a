"""``plinth canary``: a settings change on a share of an endpoint's traffic, beside the serving
revision, then promoted or aborted."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from plinth.cli.endpoints import spec_from
from plinth.cli.output import Endpoint, Output, OutputOpt, open_client, show

canary_app = typer.Typer(
    help="Canaries: a settings change on a share of an endpoint's traffic.", no_args_is_help=True
)

CANARY_COLUMNS = [
    "revision",
    "baseline_revision",
    "weight",
    "sticky",
    "status",
    "ready_replicas",
    "reason",
    "started_at",
]


@canary_app.command("start")
def canary_start(
    endpoint: Endpoint,
    weight: Annotated[int, typer.Option("--weight", "-w", help="percent of requests, 1-50")],
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="the canary's spec (YAML); default: $EDITOR")
    ] = None,
    sticky: Annotated[bool, typer.Option(help="one conversation, one revision")] = False,
    replicas: Annotated[int, typer.Option(help="the canary pool's replicas")] = 1,
    message: Annotated[str, typer.Option("--message", "-m")] = "",
    output: OutputOpt = Output.table,
) -> None:
    """Run changed settings beside the serving revision on a share of the requests.

    Example: plinth canary start llama-chat --weight 20 -f fp8.yaml
    """
    with open_client() as client:
        spec = spec_from(file, client.endpoints.get(endpoint).spec)
        started = client.canaries.start(
            endpoint, spec, weight=weight, sticky=sticky, replicas=replicas, message=message
        )
        show(started, output, CANARY_COLUMNS)


@canary_app.command("status")
def canary_status(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """The running canary (else the last one), with each side's figures over its window.

    Example: plinth canary status llama-chat
    """
    with open_client() as client:
        show(client.canaries.get(endpoint), output, [*CANARY_COLUMNS, "traffic"])


@canary_app.command("promote")
def canary_promote(
    endpoint: Endpoint,
    message: Annotated[str, typer.Option("--message", "-m")] = "",
    output: OutputOpt = Output.table,
) -> None:
    """Make the canary's revision the endpoint's, rolled out to every replica.

    Example: plinth canary promote llama-chat
    """
    with open_client() as client:
        show(client.canaries.promote(endpoint, message=message), output, CANARY_COLUMNS)


@canary_app.command("abort")
def canary_abort(
    endpoint: Endpoint,
    reason: Annotated[str, typer.Option("--reason", help="why (on the timeline)")] = "",
    output: OutputOpt = Output.table,
) -> None:
    """Send every request to the serving revision again and remove the canary's pool.

    Example: plinth canary abort llama-chat --reason "ITL regressed"
    """
    with open_client() as client:
        show(client.canaries.abort(endpoint, reason=reason), output, CANARY_COLUMNS)
