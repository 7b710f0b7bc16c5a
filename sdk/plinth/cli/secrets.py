"""``plinth secrets``: secrets by name; a value goes in from stdin or a file and never comes
back out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from plinth.cli.output import EXIT_INVALID, Output, OutputOpt, open_client, show

secrets_app = typer.Typer(help="Secrets (values are write-only).", no_args_is_help=True)


@secrets_app.command("list")
def secrets_list(output: OutputOpt = Output.table) -> None:
    """List secrets (names only).

    Example: plinth secrets list
    """
    with open_client() as client:
        show(list(client.secrets.list()), output, ["id", "name", "description", "updated_at"])


@secrets_app.command("set")
def secrets_set(
    name: str,
    from_file: Annotated[
        Path | None, typer.Option("--from-file", help="read the value from this file")
    ] = None,
    description: str = "",
) -> None:
    """Create or replace a secret; the value comes from stdin or a file, never an argument
    (arguments are visible to other users in the process list and shell history).

    Example: plinth secrets set hf-token --from-file token.txt
    """
    value = from_file.read_text(encoding="utf-8") if from_file else sys.stdin.read()
    value = value.rstrip("\n")
    if not value:
        typer.echo("error: empty value (pipe it in or use --from-file)", err=True)
        raise typer.Exit(EXIT_INVALID)
    with open_client() as client:
        secret = client.secrets.set(name, value, description=description)
    typer.echo(f"secret {secret.name} saved")


@secrets_app.command("delete")
def secrets_delete(secret_id: str) -> None:
    """Delete a secret by id.

    Example: plinth secrets delete 3f2c...
    """
    with open_client() as client:
        client.secrets.delete(secret_id)
