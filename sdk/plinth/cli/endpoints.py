"""The endpoint commands: sign in, list and show endpoints, create, edit, roll back, scale,
stop, start and delete them, their logs, usage and revisions, and the clusters they run on."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from plinth import apply as declarative
from plinth import config
from plinth.cli.output import Endpoint, Output, OutputOpt, YesOpt, open_client, plain, show
from plinth.client import Plinth

ENDPOINT_COLUMNS = [
    "slug",
    "status",
    "desired_replicas",
    "ready_replicas",
    "target_revision",
    "cluster",
]


def login(
    url: Annotated[
        str, typer.Argument(help="the Plinth console URL, e.g. https://plinth.example.com")
    ],
    key_file: Annotated[Path | None, typer.Option(help="read the key from this file")] = None,
) -> None:
    """Store the URL and a management key (read from stdin, a file, or a hidden prompt).

    Example: plinth login https://plinth.example.com < key.txt   (or pipe it in)
    """
    if key_file is not None:
        key = key_file.read_text(encoding="utf-8").strip()
    elif not sys.stdin.isatty():
        key = sys.stdin.read().strip()
    else:
        key = typer.prompt("API key", hide_input=True).strip()
    with Plinth(url, key) as client:
        # One small authenticated call proves the URL and the key before they are saved.
        next(iter(client.endpoints.list(page_size=1)), None)
    path = config.save(config.Credentials(url=url.rstrip("/"), key=key))
    typer.echo(f"signed in to {url}; saved to {path}")


def get(
    endpoint: Annotated[
        str | None, typer.Argument(help="one endpoint (default: list them)")
    ] = None,
    output: OutputOpt = Output.table,
    label: Annotated[
        list[str] | None, typer.Option("--label", "-l", help="key=value filter")
    ] = None,
    status: Annotated[str | None, typer.Option(help="only endpoints in this status")] = None,
) -> None:
    """List endpoints, or show one.

    Example: plinth get -l team=search -o yaml
    """
    with open_client() as client:
        if endpoint:
            show(
                client.endpoints.get(endpoint),
                output,
                None if output is not Output.table else [*ENDPOINT_COLUMNS, "url", "labels"],
            )
            return
        labels = dict(pair.split("=", 1) for pair in label or [])
        rows = list(client.endpoints.list(labels=labels or None, status=status))
        show(rows, output, ENDPOINT_COLUMNS)


def describe(endpoint: Endpoint, output: OutputOpt = Output.yaml) -> None:
    """An endpoint with its settings, revisions and recent events.

    Example: plinth describe llama-chat
    """
    with open_client() as client:
        detail = plain(client.endpoints.get(endpoint))
        detail["revisions"] = plain(list(client.revisions.list(endpoint)))
        events = client.endpoints.events(endpoint, page_size=20)
        detail["events"] = plain([e for _, e in zip(range(20), events, strict=False)])
        show(detail, Output.json if output is Output.json else Output.yaml)


def _read_document(path: Path) -> declarative.EndpointDocument:
    documents = declarative.load_documents(path)
    if len(documents) != 1:
        raise declarative.DocumentError(
            f"{path}: expected one Endpoint document", code="invalid_document"
        )
    return documents[0]


def create(
    file: Annotated[Path, typer.Option("--file", "-f", help="an Endpoint document (YAML)")],
    replicas: Annotated[int | None, typer.Option(help="initial replicas")] = None,
    message: Annotated[str, typer.Option("--message", "-m")] = "",
    output: OutputOpt = Output.table,
) -> None:
    """Create an endpoint from an Endpoint document (no ownership label: see `apply`).

    Example: plinth create -f llama-chat.yaml
    """
    doc = _read_document(file)
    with open_client() as client:
        created = client.endpoints.create(
            doc.name,
            doc.spec,
            name=doc.display_name,
            labels=doc.labels or None,
            replicas=replicas,
            message=message,
        )
        show(created, output, ENDPOINT_COLUMNS)


def edit(
    endpoint: Endpoint,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="the new spec (YAML); default: $EDITOR")
    ] = None,
    message: Annotated[str, typer.Option("--message", "-m")] = "",
    output: OutputOpt = Output.table,
) -> None:
    """Edit an endpoint's settings as a new revision (a conflict if someone saved meanwhile).

    Example: plinth edit llama-chat            # opens $EDITOR on the settings
    """
    with open_client() as client:
        current = client.endpoints.get(endpoint)
        spec = spec_from(file, current.spec)
        if spec == current.spec:
            typer.echo("no change")
            return
        updated = client.endpoints.update(
            endpoint, spec, base_revision=current.target_revision or 0, message=message
        )
        show(updated, output, ENDPOINT_COLUMNS)


def spec_from(file: Path | None, current: dict[str, Any]) -> Any:
    """New settings: read from ``file`` (YAML), else edited in ``$EDITOR`` starting from the
    ``current`` ones."""
    if file is not None:
        return yaml.safe_load(file.read_text(encoding="utf-8"))
    return _edit_in_editor(current)


def _edit_in_editor(spec: dict[str, Any]) -> Any:
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.NamedTemporaryFile(
        "w+", suffix=".yaml", delete=False, encoding="utf-8"
    ) as handle:
        handle.write(yaml.safe_dump(spec, sort_keys=False))
    try:
        subprocess.run([*editor.split(), handle.name], check=True)
        return yaml.safe_load(Path(handle.name).read_text(encoding="utf-8"))
    finally:
        os.unlink(handle.name)


def rollback(
    endpoint: Endpoint,
    to: Annotated[int, typer.Option("--to", help="the revision whose settings to restore")],
    message: Annotated[str, typer.Option("--message", "-m")] = "",
    output: OutputOpt = Output.table,
) -> None:
    """Restore an earlier revision's settings (as a new revision).

    Example: plinth rollback llama-chat --to 3
    """
    with open_client() as client:
        show(client.endpoints.rollback(endpoint, to, message=message), output, ENDPOINT_COLUMNS)


def scale(
    endpoint: Endpoint,
    replicas: Annotated[int, typer.Argument(help="replicas wanted")],
    output: OutputOpt = Output.table,
) -> None:
    """Set the replica count.

    Example: plinth scale llama-chat 3
    """
    with open_client() as client:
        show(client.endpoints.scale(endpoint, replicas), output, ENDPOINT_COLUMNS)


def stop(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """Stop an endpoint (its settings are kept).

    Example: plinth stop llama-chat
    """
    with open_client() as client:
        show(client.endpoints.stop(endpoint), output, ENDPOINT_COLUMNS)


def start(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """Start a stopped endpoint.

    Example: plinth start llama-chat
    """
    with open_client() as client:
        show(client.endpoints.start(endpoint), output, ENDPOINT_COLUMNS)


def delete(endpoint: Endpoint, yes: YesOpt = False, output: OutputOpt = Output.table) -> None:
    """Delete an endpoint.

    Example: plinth delete llama-chat --yes
    """
    if not yes:
        typer.confirm(f"delete {endpoint}?", abort=True)
    with open_client() as client:
        show(client.endpoints.delete(endpoint), output, ENDPOINT_COLUMNS)


def logs(
    endpoint: Endpoint,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new lines")] = False,
    replica: Annotated[str | None, typer.Option(help="one replica (default: the first)")] = None,
    tail: Annotated[int | None, typer.Option(help="lines from the end to start with")] = None,
) -> None:
    """Print a replica's log (API keys masked); -f follows it until interrupted.

    Example: plinth logs llama-chat -f --tail 100
    """
    with open_client() as client:
        try:
            for line in client.logs.lines(endpoint, follow=follow, replica=replica, tail=tail):
                typer.echo(line.text)
        except KeyboardInterrupt:
            pass


def usage(
    endpoint: Annotated[str | None, typer.Argument(help="one endpoint (default: all)")] = None,
    start: Annotated[str | None, typer.Option(help="ISO 8601 start")] = None,
    end: Annotated[str | None, typer.Option(help="ISO 8601 end")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Requests and tokens by key.

    Example: plinth usage llama-chat --start 2026-11-01T00:00:00Z
    """
    with open_client() as client:
        answer = client.usage.get(endpoint, start=start, end=end)
        columns = [
            "deployment_slug",
            "api_key_name",
            "requests",
            "prompt_tokens",
            "completion_tokens",
        ]
        show(answer.rows if output is Output.table else answer, output, columns)


def costs(
    by: Annotated[str, typer.Option(help="endpoint (and revision) or key")] = "endpoint",
    month: Annotated[str | None, typer.Option(help="YYYY-MM (default: this month)")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """GPU-hours and cost (USD) of a month by endpoint and revision, or by key.

    Example: plinth costs --by key --month 2026-11
    """
    with open_client() as client:
        answer = client.costs.get(by=by, month=month)
        columns = ["label", "gpu_hours", "cost", "tokens"]
        show(answer.rows if output is Output.table else answer, output, columns)


def clusters(output: OutputOpt = Output.table) -> None:
    """List clusters.

    Example: plinth clusters -o yaml
    """
    with open_client() as client:
        show(list(client.clusters.list()), output, ["id", "name", "kind"])


def revisions(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """List an endpoint's revisions.

    Example: plinth revisions llama-chat
    """
    with open_client() as client:
        show(
            list(client.revisions.list(endpoint)),
            output,
            ["number", "author", "message", "rollback_of", "is_target", "is_current", "created_at"],
        )
