"""``plinth place``, ``plinth drain`` and ``plinth undrain``: an endpoint across clusters, and a
cluster emptied for maintenance."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from plinth.cli.output import EXIT_USAGE, Output, OutputOpt, open_client, show

PLACEMENT_COLUMNS = ["cluster", "home", "state", "min_replicas", "weight", "desired_replicas",
                     "ready_replicas"]  # fmt: skip
DRAIN_COLUMNS = ["cluster", "draining", "draining_since", "endpoints"]


def _entry(text: str) -> dict[str, Any]:
    """``east`` or ``east:min=1,weight=3``."""
    name, _, options = text.partition(":")
    entry: dict[str, Any] = {"cluster": name}
    for option in filter(None, options.split(",")):
        key, equals, value = option.partition("=")
        if not equals or key not in ("min", "weight") or not value.isdigit():
            typer.echo(f"error: {text!r}: write CLUSTER[:min=N,weight=N]", err=True)
            raise typer.Exit(EXIT_USAGE)
        entry["min_replicas" if key == "min" else "weight"] = int(value)
    return entry


def place(
    endpoint: str,
    clusters: Annotated[
        list[str],
        typer.Argument(help="CLUSTER[:min=N,weight=N] ..., the endpoint's home first"),
    ],
    policy: Annotated[
        str, typer.Option(help="cheapest (the default), spread or weighted")
    ] = "cheapest",
    output: OutputOpt = Output.table,
) -> None:
    """Place an endpoint's replicas on clusters (no new revision; replicas move with new ones
    ready before old ones stop).

    Example: plinth place llama-chat gpu-east:min=1 gpu-west --policy spread
    """
    with open_client() as client:
        placed = client.endpoints.place(
            endpoint, policy=policy, clusters=[_entry(c) for c in clusters]
        )
    show(list(placed.clusters), output, PLACEMENT_COLUMNS)


def drain(cluster: str, output: OutputOpt = Output.table) -> None:
    """Drain a cluster for maintenance (admins): every endpoint's replicas start on its other
    clusters first, then stop here. An endpoint on this cluster alone keeps serving here.

    Example: plinth drain gpu-east
    """
    with open_client() as client:
        show(client.clusters.drain(cluster), output, DRAIN_COLUMNS)


def undrain(cluster: str, output: OutputOpt = Output.table) -> None:
    """End a cluster's drain: endpoints are planned onto it again by their placement policy.

    Example: plinth undrain gpu-east
    """
    with open_client() as client:
        show(client.clusters.drain(cluster, undo=True), output, DRAIN_COLUMNS)
