"""What every ``plinth`` command shares: the exit codes, the ``--output`` formats and their
printing, the common arguments, and the client the commands talk through."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
import yaml
from pydantic import BaseModel

from plinth.client import Plinth
from plinth.errors import (
    AuthenticationFailed,
    Conflict,
    ConnectionFailed,
    NotFound,
    PermissionDenied,
    PlinthError,
    ServerError,
    ValidationFailed,
)

EXIT_DIFFERENCES, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT, EXIT_INVALID = 1, 2, 3, 4, 5
EXIT_AUTH, EXIT_UNAVAILABLE, EXIT_API = 6, 7, 8

EPILOG = (
    "Exit codes: 0 done, 1 diff found differences, 2 usage, 3 not found, 4 conflict, "
    "5 refused input, 6 not signed in or not allowed, 7 API unreachable, 8 other API error."
)


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table, json or yaml")]
Endpoint = Annotated[str, typer.Argument(help="the endpoint's slug or id")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]


def open_client() -> Plinth:
    """The client of the signed-in user (``PLINTH_URL``/``PLINTH_API_KEY`` or ``plinth login``)."""
    return Plinth()


def plain(value: Any) -> Any:
    """A model (or a list of them) as the JSON-ready data the API sent."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def show(value: Any, output: Output, columns: list[str] | None = None) -> None:
    """Print ``value`` as JSON, YAML, or a table of ``columns`` (a record: key/value lines)."""
    data = plain(value)
    if output is Output.json:
        typer.echo(json.dumps(data, indent=2, default=str))
    elif output is Output.yaml:
        typer.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
    elif isinstance(data, list):
        cols = columns or (list(data[0]) if data else [])
        rows = [[_cell(row.get(c)) for c in cols] for row in data]
        widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(cols)]
        typer.echo(
            "  ".join(c.upper().ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()
        )
        for row in rows:
            typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    else:
        for key in columns or list(data):
            typer.echo(f"{key}: {_cell(data.get(key))}")


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        if "name" in value:
            return str(value["name"])
        return ",".join(f"{k}={v}" for k, v in value.items())
    return "" if value is None else str(value)


def exit_for(exc: PlinthError) -> typer.Exit:
    """Print an API error and return the exit that says its kind (the codes in :data:`EPILOG`)."""
    typer.echo(f"error: {exc}", err=True)
    codes: list[tuple[type[PlinthError], int]] = [
        (NotFound, EXIT_NOT_FOUND),
        (Conflict, EXIT_CONFLICT),
        (ValidationFailed, EXIT_INVALID),
        (AuthenticationFailed, EXIT_AUTH),
        (PermissionDenied, EXIT_AUTH),
        (ConnectionFailed, EXIT_UNAVAILABLE),
        (ServerError, EXIT_UNAVAILABLE),
    ]
    for kind, code in codes:
        if isinstance(exc, kind):
            return typer.Exit(code)
    return typer.Exit(EXIT_AUTH if exc.code == "not_configured" else EXIT_API)
