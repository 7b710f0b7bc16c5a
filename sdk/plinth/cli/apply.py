"""``plinth diff`` and ``plinth apply``: Endpoint documents against what is deployed, and
saved where they differ (see :mod:`plinth.apply` for the plan itself)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from plinth import apply as declarative
from plinth.cli.output import EXIT_DIFFERENCES, open_client

FileOpt = Annotated[
    Path, typer.Option("--file", "-f", help="a directory of Endpoint documents, or one file")
]
OwnerOpt = Annotated[
    str,
    typer.Option(
        help=f"the ownership label's value ({declarative.OWNER_LABEL}=OWNER): one per repository"
    ),
]


def _print_plan(actions: list[declarative.Action]) -> None:
    for action in actions:
        mark = {"create": "+", "update": "~", "delete": "-", "unchanged": "="}[action.kind]
        typer.echo(f"{mark} {action.name}: {action.kind}")
        for change in action.changes:
            typer.echo(
                f"    {change['path']}: "
                f"{json.dumps(change['before'])} -> {json.dumps(change['after'])}"
            )
        if action.labels_changed:
            typer.echo("    (labels)")


def diff(
    file: FileOpt,
    owner: OwnerOpt = declarative.DEFAULT_OWNER,
    prune: Annotated[bool, typer.Option(help="also show what --prune would delete")] = False,
) -> None:
    """Field-level differences between the documents and what is deployed; exit code 1 when
    any.

    Example: plinth diff -f endpoints/ --prune
    """
    documents = declarative.load_documents(file)
    with open_client() as client:
        actions = declarative.plan(client, documents, owner=owner, prune=prune)
    _print_plan(actions)
    if any(a.kind != "unchanged" for a in actions):
        raise typer.Exit(EXIT_DIFFERENCES)


def apply_command(
    file: FileOpt,
    owner: OwnerOpt = declarative.DEFAULT_OWNER,
    prune: Annotated[
        bool, typer.Option(help="delete endpoints with this owner label that no document names")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the plan, change nothing")
    ] = False,
    message: Annotated[
        str, typer.Option("--message", "-m", help="revision message")
    ] = "plinth apply",
) -> None:
    """Create or update endpoints from Endpoint documents: a new revision only where settings
    changed, based on the revision diffed (a concurrent change is a conflict, exit code 4).

    Example: plinth apply -f endpoints/ --prune --owner infra-repo
    """
    documents = declarative.load_documents(file)
    with open_client() as client:
        actions = declarative.plan(client, documents, owner=owner, prune=prune)
        if dry_run:
            _print_plan(actions)
            return
        for action in declarative.apply(client, actions, owner=owner, message=message):
            typer.echo(f"{action.name}: {action.result}")
