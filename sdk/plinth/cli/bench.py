"""``plinth bench``: benchmarks of an endpoint, their figures per load point beside the
optimizer's prediction, and two of them compared."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from plinth.cli.output import Endpoint, Output, OutputOpt, open_client, plain, show

bench_app = typer.Typer(
    help="Benchmarks: NVIDIA AIPerf against an endpoint, compared with the optimizer's "
    "prediction and with each other.",
    no_args_is_help=True,
)

BENCH_COLUMNS = ["id", "name", "revision", "status", "runner", "created_at", "error"]


def _point_rows(benchmark: Any) -> list[dict[str, Any]]:
    """One row per load point: measured figures beside the optimizer's prediction."""
    data = plain(benchmark)
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
    with open_client() as client:
        queued = client.benchmarks.run(endpoint, profile=profile, name=name, revision=revision)
        show(queued, output, BENCH_COLUMNS)


@bench_app.command("list")
def bench_list(endpoint: Endpoint, output: OutputOpt = Output.table) -> None:
    """An endpoint's benchmarks, newest first.

    Example: plinth bench list llama-chat
    """
    with open_client() as client:
        show(client.benchmarks.list(endpoint), output, BENCH_COLUMNS)


@bench_app.command("show")
def bench_show(endpoint: Endpoint, benchmark_id: str, output: OutputOpt = Output.table) -> None:
    """A benchmark's results per load point, beside the optimizer's prediction (ms).

    Example: plinth bench show llama-chat 3f2a...
    """
    with open_client() as client:
        benchmark = client.benchmarks.get(endpoint, benchmark_id)
    if output is not Output.table:
        show(benchmark, output)
        return
    show(benchmark, output, BENCH_COLUMNS)
    rows = _point_rows(benchmark)
    if rows:
        typer.echo("")
        show(rows, output)
    for point in plain(benchmark).get("results") or []:
        for note in point.get("notes") or []:  # short or empty answers, in words
            typer.echo(f"{point['kind']}={point['value']:g}: {note}")


@bench_app.command("compare")
def bench_compare(endpoint: Endpoint, a: str, b: str, output: OutputOpt = Output.table) -> None:
    """Two benchmarks side by side: each figure of a and b and the change, per load point.

    Example: plinth bench compare llama-chat 3f2a... 9c1d...
    """
    with open_client() as client:
        compared = client.benchmarks.compare(endpoint, a, b)
    if output is not Output.table:
        show(compared, output)
        return
    rows = []
    for point in plain(compared)["points"]:
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
