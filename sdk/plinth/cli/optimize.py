"""``plinth optimize``: ranked settings for a traffic profile, shown as a table or as the API's
answer, and with ``--apply`` or ``--create`` the best one saved."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from plinth.cli.output import EXIT_INVALID, Output, OutputOpt, open_client, plain, show
from plinth.client import Plinth
from plinth.optimizer import fit_candidate, optimizer_message


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
    data = plain(result)
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
    with open_client() as client:
        current = client.endpoints.get(apply_to) if apply_to else None
        model = _model_of(model, current)
        cluster_id = _cluster_id(client, cluster)
        result = client.optimize(
            model,
            gpus=gpu or None,
            traffic=_given(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                rate_rps=rate,
                concurrency=concurrency,
                prefix_share=shared_prefix,
                turns=turns,
            ),
            slo=_given(
                ttft_p90_s=_ms_to_s(ttft_p90_ms),
                itl_p90_s=_ms_to_s(itl_p90_ms),
                e2e_p90_s=_ms_to_s(e2e_p90_ms),
                tpot_mean_s=_ms_to_s(tpot_mean_ms),
            ),
            limits={"max_cost_per_hour": max_cost, "max_gpus": max_gpus},
            objective=objective.value,
            cluster_id=cluster_id,
            confirm=confirm,
            confirm_top=confirm_top,
        )
        deployed = None
        if apply_to or create_as:
            if result.best is None:
                _show_optimized(result, None, output, top)
                typer.echo("error: no candidate meets the SLOs and limits; nothing saved", err=True)
                raise typer.Exit(EXIT_INVALID)
            deployed = _save_pick(
                client,
                result.best,
                apply_to=apply_to,
                current=current,
                create_as=create_as,
                cluster_id=cluster_id,
            )
    _show_optimized(result, deployed, output, top)


def _model_of(model: str | None, current: Any) -> str:
    """The model asked for, else (with ``--apply``) the one the endpoint serves."""
    if model is not None:
        return model
    if current is None:
        raise typer.BadParameter(
            "name the model (or an endpoint with --apply)", param_hint="--model"
        )
    return str(current.spec["model"]["source"])


def _given(**figures: Any) -> dict[str, Any]:
    """The figures given on the command line; the server's defaults stand for the rest."""
    return {name: value for name, value in figures.items() if value is not None}


def _save_pick(
    client: Plinth,
    best: Any,
    *,
    apply_to: str | None,
    current: Any,
    create_as: str | None,
    cluster_id: str | None,
) -> Any:
    """The best pick saved: fitted to endpoint ``apply_to`` (whose settings are ``current``) as
    its new revision, else as the new endpoint ``create_as``."""
    message = optimizer_message(best.label)
    if current is not None and apply_to:
        spec = fit_candidate(current.spec, best.spec, endpoint=apply_to)
        return client.endpoints.update(
            apply_to, spec, base_revision=current.target_revision or 0, message=message
        )
    if create_as:
        return client.endpoints.create(create_as, best.spec, cluster_id=cluster_id, message=message)
    return None


def _show_optimized(result: Any, deployed: Any, output: Output, top: int) -> None:
    """JSON/YAML: the optimizer's answer (with ``--apply``/``--create``: ``{result, endpoint}``);
    a table: the ranked candidates, the notes, then what was saved."""
    if output is not Output.table:
        show(
            result if deployed is None else {"result": plain(result), "endpoint": plain(deployed)},
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
