"""The ``plinth`` command: endpoints, revisions, logs, keys, usage, secrets, canaries, quality
gates, benchmarks, the optimizer and declarative apply.

Exit codes (also in ``plinth --help``): 0 done; 1 ``diff`` found differences; 2 wrong usage;
3 not found; 4 conflict (e.g. a revision saved by someone else: plan again); 5 refused input
(the field and its fix are printed); 6 not signed in or not allowed; 7 the API is unreachable or
failing; 8 any other API error.

``plinth optimize`` exits 5 when nothing meets the SLOs and limits but ``--apply`` or ``--create``
asked for a pick.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import BaseModel

from plinth import apply as declarative
from plinth import config
from plinth.client import Plinth, fit_candidate, optimizer_message
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

EXIT_DIFFERENCES, EXIT_NOT_FOUND, EXIT_CONFLICT, EXIT_INVALID = 1, 3, 4, 5
EXIT_AUTH, EXIT_UNAVAILABLE, EXIT_API = 6, 7, 8

EPILOG = (
    "Exit codes: 0 done, 1 diff found differences, 2 usage, 3 not found, 4 conflict, "
    "5 refused input, 6 not signed in or not allowed, 7 API unreachable, 8 other API error."
)

app = typer.Typer(
    name="plinth",
    help="Plinth from the command line. Start with `plinth login URL`.",
    epilog=EPILOG,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
keys_app = typer.Typer(help="Management and inference keys.", no_args_is_help=True)
secrets_app = typer.Typer(help="Secrets (values are write-only).", no_args_is_help=True)
canary_app = typer.Typer(
    help="Canaries: a settings change on a share of an endpoint's traffic.", no_args_is_help=True
)
app.add_typer(keys_app, name="keys")
app.add_typer(secrets_app, name="secrets")
app.add_typer(canary_app, name="canary")
bench_app = typer.Typer(
    help="Benchmarks: NVIDIA AIPerf against an endpoint, compared with the optimizer's "
    "prediction and with each other.",
    no_args_is_help=True,
)
app.add_typer(bench_app, name="bench")
gate_app = typer.Typer(
    help="Quality gates: a canary's revision scored against its baseline (KL divergence); "
    "the canary is promoted only once its gate passes.",
    no_args_is_help=True,
)
app.add_typer(gate_app, name="gate")


class Output(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table, json or yaml")]
Endpoint = Annotated[str, typer.Argument(help="the endpoint's slug or id")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]


def _client() -> Plinth:
    return Plinth()


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def show(value: Any, output: Output, columns: list[str] | None = None) -> None:
    """Print ``value`` as JSON, YAML, or a table of ``columns`` (a record: key/value lines)."""
    data = _plain(value)
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


def _fail(exc: PlinthError) -> typer.Exit:
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


ENDPOINT_COLUMNS = [
    "slug",
    "status",
    "desired_replicas",
    "ready_replicas",
    "target_revision",
    "cluster",
]


@app.command()
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


@app.command()
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
    with _client() as client:
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


@app.command()
def describe(endpoint: Endpoint, output: OutputOpt = Output.yaml) -> None:
    """An endpoint with its settings, revisions and recent events.

    Example: plinth describe llama-chat
    """
    with _client() as client:
        detail = _plain(client.endpoints.get(endpoint))
        detail["revisions"] = _plain(list(client.revisions.list(endpoint)))
        events = client.endpoints.events(endpoint, page_size=20)
        detail["events"] = _plain([e for _, e in zip(range(20), events, strict=False)])
        show(detail, Output.json if output is Output.json else Output.yaml)


def _read_document(path: Path) -> declarative.EndpointDocument:
    documents = declarative.load_documents(path)
    if len(documents) != 1:
        raise declarative.DocumentError(
            f"{path}: expected one Endpoint document", code="invalid_document"
        )
    return documents[0]


@app.command()
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
    with _client() as client:
        created = client.endpoints.create(
            doc.name,
            doc.spec,
            name=doc.display_name,
            labels=doc.labels or None,
            replicas=replicas,
            message=message,
        )
        show(created, output, ENDPOINT_COLUMNS)


@app.command()
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
    with _client() as client:
        current = client.endpoints.get(endpoint)
        if file is not None:
            spec = yaml.safe_load(file.read_text(encoding="utf-8"))
        else:
            spec = _edit_in_editor(current.spec)
        if spec == current.spec:
            typer.echo("no change")
            return
        updated = client.endpoints.update(
            endpoint, spec, base_revision=current.target_revision or 0, message=message
        )
        show(updated, output, ENDPOINT_COLUMNS)


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


@app.command()
def rollback(
    endpoint: Endpoint,
    to: Annotated[int, typer.Option("--to", help="the revision whose settings to restore")],
    message: Annotated[str, typer.Option("--message", "-m")] = "",
    output: OutputOpt = Output.table,
) -> None:
    """Restore an earlier revision's settings (as a new revision).

    Example: plinth rollback llama-chat --to 3
    """
    with _client() as client:
        show(client.endpoints.rollback(endpoint, to, message=message), output, ENDPOINT_COLUMNS)


@app.command()
def scale(
    endpoint: Endpoint,
    replicas: Annotated[int, typer.Argument(help="replicas wanted")],
    output: OutputOpt = Output.table,
) -> None:
    """Set the replica count.

    Example: plinth scale llama-chat 3
    """
    with _client() as client:
        show(client.endpoints.scale(endpoint, replicas), output, ENDPOINT_COLUMNS)


@app.command()
def stop(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """Stop an endpoint (its settings are kept).

    Example: plinth stop llama-chat
    """
    with _client() as client:
        show(client.endpoints.stop(endpoint), output, ENDPOINT_COLUMNS)


@app.command()
def start(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """Start a stopped endpoint.

    Example: plinth start llama-chat
    """
    with _client() as client:
        show(client.endpoints.start(endpoint), output, ENDPOINT_COLUMNS)


@app.command()
def delete(endpoint: Endpoint, yes: YesOpt = False, output: OutputOpt = Output.table) -> None:
    """Delete an endpoint.

    Example: plinth delete llama-chat --yes
    """
    if not yes:
        typer.confirm(f"delete {endpoint}?", abort=True)
    with _client() as client:
        show(client.endpoints.delete(endpoint), output, ENDPOINT_COLUMNS)


@app.command()
def logs(
    endpoint: Endpoint,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new lines")] = False,
    replica: Annotated[str | None, typer.Option(help="one replica (default: the first)")] = None,
    tail: Annotated[int | None, typer.Option(help="lines from the end to start with")] = None,
) -> None:
    """Print a replica's log (API keys masked); -f follows it until interrupted.

    Example: plinth logs llama-chat -f --tail 100
    """
    with _client() as client:
        try:
            for line in client.logs.lines(endpoint, follow=follow, replica=replica, tail=tail):
                typer.echo(line.text)
        except KeyboardInterrupt:
            pass


@app.command()
def usage(
    endpoint: Annotated[str | None, typer.Argument(help="one endpoint (default: all)")] = None,
    start: Annotated[str | None, typer.Option(help="ISO 8601 start")] = None,
    end: Annotated[str | None, typer.Option(help="ISO 8601 end")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Requests and tokens by key.

    Example: plinth usage llama-chat --start 2026-11-01T00:00:00Z
    """
    with _client() as client:
        answer = client.usage.get(endpoint, start=start, end=end)
        columns = [
            "deployment_slug",
            "api_key_name",
            "requests",
            "prompt_tokens",
            "completion_tokens",
        ]
        show(answer.rows if output is Output.table else answer, output, columns)


@keys_app.command("list")
def keys_list(output: OutputOpt = Output.table) -> None:
    """List keys.

    Example: plinth keys list -o json
    """
    with _client() as client:
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
    output: OutputOpt = Output.table,
) -> None:
    """Create a key; its secret is printed this once.

    Example: plinth keys create ci-bot --kind management --role developer
    """
    with _client() as client:
        show(client.keys.create(name, kind=kind, role=role), output, ["id", "name", "kind", "key"])


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
    output: OutputOpt = Output.table,
) -> None:
    """Change an inference key's per-minute limits; a limit not given stays as it is.

    Example: plinth keys update 3f2c... --rpm 600 --tpm none
    """
    limits = {
        name: _limit(value, f"--{name.replace('_', '-')}")
        for name, value in (
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
        )
        if value is not None
    }
    if not limits:
        raise typer.BadParameter("give --rpm, --tpm or both", param_hint="--rpm")
    with _client() as client:
        show(
            client.keys.update(key_id, **limits),
            output,
            ["id", "name", "requests_per_minute", "tokens_per_minute"],
        )


@keys_app.command("revoke")
def keys_revoke(key_id: str, output: OutputOpt = Output.table) -> None:
    """Revoke a key.

    Example: plinth keys revoke 3f2c...
    """
    with _client() as client:
        show(client.keys.revoke(key_id), output, ["id", "name", "revoked_at"])


@secrets_app.command("list")
def secrets_list(output: OutputOpt = Output.table) -> None:
    """List secrets (names only).

    Example: plinth secrets list
    """
    with _client() as client:
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
    with _client() as client:
        secret = client.secrets.set(name, value, description=description)
    typer.echo(f"secret {secret.name} saved")


@secrets_app.command("delete")
def secrets_delete(secret_id: str) -> None:
    """Delete a secret by id.

    Example: plinth secrets delete 3f2c...
    """
    with _client() as client:
        client.secrets.delete(secret_id)


@app.command()
def clusters(output: OutputOpt = Output.table) -> None:
    """List clusters.

    Example: plinth clusters -o yaml
    """
    with _client() as client:
        show(list(client.clusters.list()), output, ["id", "name", "kind"])


@app.command()
def revisions(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """List an endpoint's revisions.

    Example: plinth revisions llama-chat
    """
    with _client() as client:
        show(
            list(client.revisions.list(endpoint)),
            output,
            ["number", "author", "message", "rollback_of", "is_target", "is_current", "created_at"],
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
    with _client() as client:
        current = client.endpoints.get(endpoint)
        if file is not None:
            spec = yaml.safe_load(file.read_text(encoding="utf-8"))
        else:
            spec = _edit_in_editor(current.spec)
        started = client.canaries.start(
            endpoint, spec, weight=weight, sticky=sticky, replicas=replicas, message=message
        )
        show(started, output, CANARY_COLUMNS)


@canary_app.command("status")
def canary_status(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """The running canary (else the last one), with each side's figures over its window.

    Example: plinth canary status llama-chat
    """
    with _client() as client:
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
    with _client() as client:
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
    with _client() as client:
        show(client.canaries.abort(endpoint, reason=reason), output, CANARY_COLUMNS)


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
    data = _plain(gate)
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
    with _client() as client:
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
    with _client() as client:
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
    with _client() as client:
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
    with _client() as client:
        gate = client.gates.override(endpoint, revision, reason=reason)
    show(gate, output, ["id", "revision", "status", "override_reason", "overridden_by"])


BENCH_COLUMNS = ["id", "name", "revision", "status", "runner", "created_at", "error"]


def _point_rows(benchmark: Any) -> list[dict[str, Any]]:
    """One row per load point: measured figures beside the optimizer's prediction."""
    data = _plain(benchmark)
    predicted = {(p["kind"], p["value"]): p for p in data.get("prediction") or []}
    rows = []
    for point in data.get("results") or []:
        lat = point.get("latency_ms") or {}
        guess = predicted.get((point["kind"], point["value"]), {})
        rows.append(
            {
                "load": f"{point['kind']}={point['value']:g}",
                "requests": point["requests"],
                "errors": point["errors"],
                "empty": point.get("empty_answers") or 0,
                # The answer length asked for beside the measured ones (older points lack it).
                "out_tok_asked": point.get("output_tokens_requested"),
                "out_tok_mean": point["output_tokens_mean"],
                "out_tok_min": point.get("output_tokens_min"),
                "ttft_p50": lat.get("ttft", {}).get("p50"),
                "ttft_p90": lat.get("ttft", {}).get("p90"),
                "ttft_p90_pred": guess.get("ttft_p90_ms"),
                "itl_p90": lat.get("itl", {}).get("p90"),
                "itl_p90_pred": guess.get("itl_p90_ms"),
                "e2e_p99": lat.get("e2e", {}).get("p99"),
                "out_tok_s": point["output_tokens_per_s"],
                "req_s": point["requests_per_s"],
            }
        )
    return rows


@bench_app.command("run")
def bench_run(
    endpoint: Endpoint,
    concurrency: Annotated[
        str, typer.Option("--concurrency", "-c", help="the sweep, comma-separated, e.g. 1,4,16")
    ] = "",
    rate: Annotated[float | None, typer.Option("--rate", help="requests/s instead")] = None,
    isl: Annotated[int | None, typer.Option("--isl", help="input tokens")] = None,
    osl: Annotated[int | None, typer.Option("--osl", help="output tokens")] = None,
    duration: Annotated[int | None, typer.Option("--duration", help="seconds a point")] = None,
    shared_prefix: Annotated[float | None, typer.Option(help="shared prompt share 0-0.95")] = None,
    turns: Annotated[int | None, typer.Option(help="turns per conversation")] = None,
    name: Annotated[str, typer.Option("--name")] = "",
    revision: Annotated[int | None, typer.Option(help="a running canary's revision")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Queue a benchmark of an endpoint (it runs in the background).

    Example: plinth bench run llama-chat -c 1,4,16 --isl 1024 --osl 256 --duration 60
    """
    profile = {
        "concurrency": [int(c) for c in concurrency.split(",") if c.strip()] or None,
        "request_rate": rate,
        "input_tokens": isl,
        "output_tokens": osl,
        "duration_s": duration,
        "shared_prefix": shared_prefix,
        "turns": turns,
    }
    profile = {k: v for k, v in profile.items() if v is not None}
    with _client() as client:
        queued = client.benchmarks.run(endpoint, profile=profile, name=name, revision=revision)
        show(queued, output, BENCH_COLUMNS)


@bench_app.command("list")
def bench_list(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """An endpoint's benchmarks, newest first.

    Example: plinth bench list llama-chat
    """
    with _client() as client:
        show(client.benchmarks.list(endpoint), output, BENCH_COLUMNS)


@bench_app.command("show")
def bench_show(endpoint: Endpoint, benchmark_id: str, output: OutputOpt = Output.table) -> None:
    """A benchmark's results per load point, beside the optimizer's prediction (ms).

    Example: plinth bench show llama-chat 3f2a...
    """
    with _client() as client:
        benchmark = client.benchmarks.get(endpoint, benchmark_id)
    if output is not Output.table:
        show(benchmark, output)
        return
    show(benchmark, output, BENCH_COLUMNS)
    rows = _point_rows(benchmark)
    if rows:
        typer.echo("")
        show(rows, output)
    for point in _plain(benchmark).get("results") or []:
        for note in point.get("notes") or []:  # short or empty answers, in words
            typer.echo(f"{point['kind']}={point['value']:g}: {note}")


@bench_app.command("compare")
def bench_compare(endpoint: Endpoint, a: str, b: str, output: OutputOpt = Output.table) -> None:
    """Two benchmarks side by side: each figure of a and b and the change, per load point.

    Example: plinth bench compare llama-chat 3f2a... 9c1d...
    """
    with _client() as client:
        compared = client.benchmarks.compare(endpoint, a, b)
    if output is not Output.table:
        show(compared, output)
        return
    rows = []
    for point in _plain(compared)["points"]:
        for metric, d in sorted(point["metrics"].items()):
            pct = "" if d["pct"] is None else f"{d['pct']:+.1f}%"
            rows.append(
                {
                    "load": f"{point['kind']}={point['value']:g}",
                    "metric": metric,
                    "a": d["a"],
                    "b": d["b"],
                    "change": pct,
                }
            )
    show(rows, output, ["load", "metric", "a", "b", "change"])


class Objective(StrEnum):
    cost = "cost"
    throughput = "throughput"


def _ms_to_s(value: float | None) -> float | None:
    return None if value is None else value / 1000


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _is_best(candidate: dict[str, Any], best: dict[str, Any] | None) -> bool:
    """Whether a ranked candidate is the pick. By its settings: labels can repeat (layouts
    differing in what a label leaves out), and a confirmed pick carries reasons and figures
    its ranked entry does not."""
    return best is not None and candidate["spec"] == best["spec"]


def _candidate_rows(result: Any, top: int) -> list[dict[str, Any]]:
    """The ranked candidates as table rows, figures in ms; the best one's rank marked ``*``."""
    data = _plain(result)
    rows = []
    for rank, candidate in enumerate(data["ranked"][:top], start=1):
        predicted, measured = candidate["predicted"], candidate.get("measured") or {}
        row = {
            "#": f"{rank}*" if _is_best(candidate, data.get("best")) else str(rank),
            "label": candidate["label"],
            "gpus": predicted["gpus"],
            "cost_per_hour": round(predicted["cost_per_hour"], 2),
            "capacity_rps": round(predicted["capacity_rps"], 2),
            "ttft_p90_ms": _ms(predicted["ttft_p90_s"]),
            "itl_p90_ms": _ms(predicted["itl_p90_s"]),
            "tok_s_gpu": round(predicted["tokens_per_s_per_gpu"], 1),
            "meets_slo": predicted["meets_slo"],
        }
        if data["ranked"] and any(c.get("measured") for c in data["ranked"]):
            row["measured_ttft_p90_ms"] = _ms(measured.get("ttft_p90_s"))
            row["measured_itl_p90_ms"] = _ms(measured.get("itl_p90_s"))
        rows.append(row)
    return rows


def _cluster_id(client: Plinth, cluster: str | None) -> str | None:
    """A cluster named by its name or id, as the API's id (an unknown one is left for the API
    to refuse as not found)."""
    if cluster is None:
        return None
    for known in client.clusters.list():
        if cluster in (known.name, str(known.id)):
            return str(known.id)
    return cluster


@app.command()
def optimize(
    model: Annotated[
        str | None,
        typer.Option(help="catalogue id or HF repo; with --apply, default: the endpoint's model"),
    ] = None,
    gpu: Annotated[
        list[str] | None, typer.Option("--gpu", help="a candidate GPU type (repeat); default: all")
    ] = None,
    input_tokens: Annotated[
        int | None, typer.Option("--input-tokens", "--isl", help="prompt tokens (1024)")
    ] = None,
    output_tokens: Annotated[
        int | None, typer.Option("--output-tokens", "--osl", help="output tokens (256)")
    ] = None,
    rate: Annotated[float | None, typer.Option(help="requests/s (default 1)")] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", "-c", help="requests in flight, instead of --rate"),
    ] = None,
    shared_prefix: Annotated[
        float | None, typer.Option(help="share of the prompt that is a shared prefix, 0-0.99")
    ] = None,
    turns: Annotated[int | None, typer.Option(help="turns per conversation")] = None,
    ttft_p90_ms: Annotated[float | None, typer.Option(help="SLO: p90 TTFT (1000)")] = None,
    itl_p90_ms: Annotated[float | None, typer.Option(help="SLO: p90 ITL (50)")] = None,
    e2e_p90_ms: Annotated[float | None, typer.Option(help="SLO: p90 request latency")] = None,
    tpot_mean_ms: Annotated[
        float | None, typer.Option(help="SLO: mean time per output token")
    ] = None,
    max_cost: Annotated[float | None, typer.Option(help="limit: $ per hour")] = None,
    max_gpus: Annotated[int | None, typer.Option(help="limit: GPUs in all")] = None,
    objective: Annotated[
        Objective,
        typer.Option(help="cost: cheapest carrying the rate; throughput: most tokens/s per GPU"),
    ] = Objective.cost,
    confirm: Annotated[
        bool, typer.Option(help="also measure the top picks by a short simulated run")
    ] = False,
    confirm_top: Annotated[int | None, typer.Option(help="how many to measure (3)")] = None,
    cluster: Annotated[
        str | None,
        typer.Option(help="a cluster (name or id): its GPU types and free GPUs; --create there"),
    ] = None,
    apply_to: Annotated[
        str | None,
        typer.Option("--apply", metavar="ENDPOINT", help="save the best pick as its new revision"),
    ] = None,
    create_as: Annotated[
        str | None,
        typer.Option("--create", metavar="NAME", help="create an endpoint from the best pick"),
    ] = None,
    top: Annotated[int, typer.Option(help="table rows")] = 10,
    output: OutputOpt = Output.table,
) -> None:
    """Recommend settings for a traffic profile: ranked candidates with predicted TTFT, ITL,
    throughput and cost; --apply or --create deploys the best one.

    Example: plinth optimize --model meta-llama/Llama-3.1-8B-Instruct --gpu H100-SXM --rate 6
    --isl 2000 --osl 200 --ttft-p90-ms 1000 --itl-p90-ms 40 --apply llama-chat
    """
    if apply_to and create_as:
        raise typer.BadParameter("give --apply or --create, not both", param_hint="--apply")
    with _client() as client:
        current = client.endpoints.get(apply_to) if apply_to else None
        if model is None:
            if current is None:
                raise typer.BadParameter(
                    "name the model (or an endpoint with --apply)", param_hint="--model"
                )
            model = str(current.spec["model"]["source"])
        traffic = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "rate_rps": rate,
            "concurrency": concurrency,
            "prefix_share": shared_prefix,
            "turns": turns,
        }
        slo = {
            "ttft_p90_s": _ms_to_s(ttft_p90_ms),
            "itl_p90_s": _ms_to_s(itl_p90_ms),
            "e2e_p90_s": _ms_to_s(e2e_p90_ms),
            "tpot_mean_s": _ms_to_s(tpot_mean_ms),
        }
        cluster_id = _cluster_id(client, cluster)
        result = client.optimize(
            model,
            gpus=gpu or None,
            traffic={k: v for k, v in traffic.items() if v is not None},
            slo={k: v for k, v in slo.items() if v is not None},
            limits={"max_cost_per_hour": max_cost, "max_gpus": max_gpus},
            objective=objective.value,
            cluster_id=cluster_id,
            confirm=confirm,
            confirm_top=confirm_top,
        )
        deployed = None
        if apply_to or create_as:
            best = result.best
            if best is None:
                _show_optimized(result, None, output, top)
                typer.echo("error: no candidate meets the SLOs and limits; nothing saved", err=True)
                raise typer.Exit(EXIT_INVALID)
            message = optimizer_message(best.label)
            if current is not None and apply_to:
                spec = fit_candidate(current.spec, best.spec, endpoint=apply_to)
                deployed = client.endpoints.update(
                    apply_to, spec, base_revision=current.target_revision or 0, message=message
                )
            elif create_as:
                deployed = client.endpoints.create(
                    create_as, best.spec, cluster_id=cluster_id, message=message
                )
    _show_optimized(result, deployed, output, top)


def _show_optimized(result: Any, deployed: Any, output: Output, top: int) -> None:
    """JSON/YAML: the optimizer's answer (with ``--apply``/``--create``: ``{result, endpoint}``);
    a table: the ranked candidates, the notes, then what was saved."""
    if output is not Output.table:
        show(
            result
            if deployed is None
            else {"result": _plain(result), "endpoint": _plain(deployed)},
            output,
        )
        return
    rows = _candidate_rows(result, top)
    if rows:
        show(rows, output)
    else:
        typer.echo("no candidates")
    if len(result.ranked) > len(rows):
        typer.echo(f"({len(result.ranked) - len(rows)} more: --top, or -o json for all)")
    if result.best is None:
        typer.echo("no candidate meets the SLOs and limits")
    for note in result.notes:
        typer.echo(f"note: {note}")
    if deployed is not None:
        typer.echo(
            f"{deployed.slug}: revision {deployed.target_revision} "
            f"({optimizer_message(result.best.label)})"
        )


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


@app.command()
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
    with _client() as client:
        actions = declarative.plan(client, documents, owner=owner, prune=prune)
    _print_plan(actions)
    if any(a.kind != "unchanged" for a in actions):
        raise typer.Exit(EXIT_DIFFERENCES)


@app.command("apply")
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
    with _client() as client:
        actions = declarative.plan(client, documents, owner=owner, prune=prune)
        if dry_run:
            _print_plan(actions)
            return
        for action in declarative.apply(client, actions, owner=owner, message=message):
            typer.echo(f"{action.name}: {action.result}")


def main() -> None:
    """Entry point: runs the app, turning API errors into a message and an exit code."""
    try:
        app()
    except PlinthError as exc:
        sys.exit(_fail(exc).exit_code)
    except yaml.YAMLError as exc:  # a document or spec file that is not YAML
        typer.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    except OSError as exc:  # a file named on the command line cannot be read
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
