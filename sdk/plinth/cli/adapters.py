"""``plinth adapters``: an endpoint's LoRA adapters with their traffic; add and remove one (each
a new revision, applied to the running replicas without a restart where SGLang allows it)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from plinth.cli.output import Output, OutputOpt, open_client, show
from plinth.models import AdaptersOut

adapters_app = typer.Typer(help="LoRA adapters of an endpoint.", no_args_is_help=True)
COLUMNS = ["name", "source", "rank", "serving", "requests_hour", "tokens_hour", "requests_day",
           "tokens_day"]  # fmt: skip


def _rows(listed: AdaptersOut) -> list[dict[str, Any]]:
    """The base model's own traffic first, then each adapter's."""
    base = {"name": f"{listed.served_name} (base)", "source": "", "rank": "", "serving": True}
    return [{**base, **listed.base.model_dump()}, *(a.model_dump() for a in listed.adapters)]


@adapters_app.command("list")
def adapters_list(endpoint: str, output: OutputOpt = Output.table) -> None:
    """List an endpoint's adapters with requests and tokens of the last hour and day.

    Example: plinth adapters list chat
    """
    with open_client() as client:
        listed = client.adapters.list(endpoint)
    show(listed if output != Output.table else _rows(listed), output, COLUMNS)


@adapters_app.command("add")
def adapters_add(
    endpoint: str,
    name: str,
    source: Annotated[str, typer.Option(help="Hugging Face repo id or a model cache path")],
    rank: Annotated[int, typer.Option(help="the adapter's LoRA rank r")],
    revision: Annotated[str | None, typer.Option(help="the source's commit or tag")] = None,
    pinned: Annotated[bool, typer.Option(help="never evicted from the GPU pool")] = False,
    message: str = "",
) -> None:
    """Serve one more adapter (a new revision).

    Example: plinth adapters add chat legal --source org/legal-lora --rank 16
    """
    with open_client() as client:
        listed = client.adapters.add(
            endpoint, name, source, rank, revision=revision, pinned=pinned, message=message
        )
    typer.echo(f"adapter {name} added: revision {listed.target_revision}")


@adapters_app.command("remove")
def adapters_remove(endpoint: str, name: str) -> None:
    """Stop serving an adapter (a new revision).

    Example: plinth adapters remove chat legal
    """
    with open_client() as client:
        listed = client.adapters.remove(endpoint, name)
    typer.echo(f"adapter {name} removed: revision {listed.target_revision}")
