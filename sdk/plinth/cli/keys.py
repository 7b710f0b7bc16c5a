"""``plinth keys``: management and inference keys, their per-minute limits, priority and weight,
revoking them."""

from __future__ import annotations

from typing import Annotated

import typer

from plinth.cli.output import Output, OutputOpt, open_client, show

keys_app = typer.Typer(help="Management and inference keys.", no_args_is_help=True)


@keys_app.command("list")
def keys_list(output: OutputOpt = Output.table) -> None:
    """List keys.

    Example: plinth keys list -o json
    """
    with open_client() as client:
        show(
            list(client.keys.list()), output, ["id", "name", "kind", "role", "prefix", "revoked_at"]
        )


@keys_app.command("create")
def keys_create(
    name: str,
    kind: Annotated[str, typer.Option(help="management or inference")] = "inference",
    role: Annotated[
        str, typer.Option(help="management keys: admin, developer or viewer")
    ] = "developer",
    priority: Annotated[
        str | None, typer.Option(help="inference keys, under overload: critical, standard, batch")
    ] = None,
    weight: Annotated[
        int | None, typer.Option(min=1, help="inference keys: share against the same priority")
    ] = None,
    adapter: Annotated[
        list[str] | None,
        typer.Option(help="inference keys: a LoRA adapter it may call (repeat); not the base"),
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Create a key; its secret is printed this once.

    Example: plinth keys create ci-bot --kind management --role developer
    Example: plinth keys create nightly-batch --priority batch --weight 1
    Example: plinth keys create legal-team --adapter legal
    """
    share: dict[str, object] = {
        n: v for n, v in (("priority", priority), ("weight", weight)) if v is not None
    }
    if adapter:
        share["allowed_adapters"] = adapter
    with open_client() as client:
        created = client.keys.create(name, kind=kind, role=role, **share)
        show(created, output, ["id", "name", "kind", "key"])


def _limit(value: str | None, option: str) -> int | None:
    """A limit given on the command line: a whole number, or ``none`` to lift it."""
    if value is None or value.lower() == "none":
        return None
    if not value.isdigit():
        raise typer.BadParameter("a whole number, or none to lift the limit", param_hint=option)
    return int(value)


@keys_app.command("update")
def keys_update(
    key_id: str,
    requests_per_minute: Annotated[
        str | None,
        typer.Option("--requests-per-minute", "--rpm", help="a whole number, or none to lift it"),
    ] = None,
    tokens_per_minute: Annotated[
        str | None,
        typer.Option("--tokens-per-minute", "--tpm", help="a whole number, or none to lift it"),
    ] = None,
    priority: Annotated[
        str | None, typer.Option(help="under overload: critical, standard or batch")
    ] = None,
    weight: Annotated[
        int | None, typer.Option(min=1, help="share against keys of the same priority")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Change an inference key's per-minute limits, priority or weight; one not given stays.

    Example: plinth keys update 3f2c... --rpm 600 --tpm none --priority critical --weight 4
    """
    limits = {
        name: _limit(value, f"--{name.replace('_', '-')}")
        for name, value in (
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
        )
        if value is not None
    }
    changes: dict[str, object] = dict(limits)
    changes.update({n: v for n, v in (("priority", priority), ("weight", weight)) if v is not None})
    if not changes:
        raise typer.BadParameter("give --rpm, --tpm, --priority or --weight", param_hint="--rpm")
    with open_client() as client:
        show(
            client.keys.update(key_id, **changes),  # type: ignore[arg-type]
            output,
            ["id", "name", "requests_per_minute", "tokens_per_minute", "priority", "weight"],
        )


@keys_app.command("revoke")
def keys_revoke(key_id: str, output: OutputOpt = Output.table) -> None:
    """Revoke a key.

    Example: plinth keys revoke 3f2c...
    """
    with open_client() as client:
        show(client.keys.revoke(key_id), output, ["id", "name", "revoked_at"])
