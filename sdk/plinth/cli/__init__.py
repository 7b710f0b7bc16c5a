"""The ``plinth`` command: endpoints, revisions, LoRA adapters, logs, keys, usage, secrets,
canaries, quality gates, placement across clusters and drains, benchmarks, the optimizer,
quantization and declarative apply.

Exit codes (also in ``plinth --help``): 0 done; 1 ``diff`` found differences; 2 wrong usage;
3 not found; 4 conflict (e.g. a revision saved by someone else: plan again); 5 refused input
(the field and its fix are printed); 6 not signed in or not allowed; 7 the API is unreachable or
failing; 8 any other API error.

``plinth optimize`` exits 5 when nothing meets the SLOs and limits but ``--apply`` or ``--create``
asked for a pick.

One module per group of commands; this one puts them together under ``app``, in the order
``plinth --help`` lists them.
"""

from __future__ import annotations

import sys

import typer
import yaml

from plinth.cli import apply, endpoints, fleet, optimize
from plinth.cli.adapters import adapters_app
from plinth.cli.bench import bench_app
from plinth.cli.canary import canary_app
from plinth.cli.gate import gate_app
from plinth.cli.keys import keys_app
from plinth.cli.output import EPILOG, EXIT_INVALID, EXIT_USAGE, exit_for
from plinth.cli.quantize import quantize_app
from plinth.cli.secrets import secrets_app
from plinth.errors import PlinthError

app = typer.Typer(
    name="plinth",
    help="Plinth from the command line. Start with `plinth login URL`.",
    epilog=EPILOG,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)
for command in (
    endpoints.login,
    endpoints.get,
    endpoints.describe,
    endpoints.create,
    endpoints.edit,
    endpoints.rollback,
    endpoints.scale,
    endpoints.stop,
    endpoints.start,
    endpoints.delete,
    endpoints.logs,
    endpoints.usage,
    endpoints.costs,
    endpoints.clusters,
    fleet.place,
    fleet.drain,
    fleet.undrain,
    endpoints.revisions,
    optimize.optimize,
    apply.diff,
):
    app.command()(command)
app.command("apply")(apply.apply_command)
app.add_typer(adapters_app, name="adapters")
app.add_typer(keys_app, name="keys")
app.add_typer(secrets_app, name="secrets")
app.add_typer(canary_app, name="canary")
app.add_typer(bench_app, name="bench")
app.add_typer(gate_app, name="gate")
app.add_typer(quantize_app, name="quantize")


def main() -> None:
    """Entry point: runs the app, turning API errors into a message and an exit code."""
    try:
        app()
    except PlinthError as exc:
        sys.exit(exit_for(exc).exit_code)
    except yaml.YAMLError as exc:  # a document or spec file that is not YAML
        typer.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_INVALID)
    except OSError as exc:  # a file named on the command line cannot be read
        typer.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_USAGE)


__all__ = ["app", "main"]
