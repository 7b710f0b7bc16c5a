"""Command line: `python -m runtime validate|plan|estimate SPEC.yaml`, `python -m runtime optimize`.

`validate` prints every issue and exits 1 when any is an error; `plan` prints the argv of each role
(refusing specs with errors); `estimate` prints the memory and cost figures. `--json` prints
machine-readable output instead. `optimize MODEL --rate N ...` prints the cheapest configuration
meeting the SLOs, the waterfall of what each optimization contributes and the Pareto front;
`--confirm` also runs the top picks through the simulator (``runtime.confirm``) and prints the
measured figures next to the predicted ones.
`quality --baseline URL --candidate URL` runs the KL quality gate between two live engines or
routers (``runtime.quality_run``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from runtime.confirm import Confirmation
    from runtime.issues import Issue
    from runtime.launch import LaunchPlan, RolePlan
    from runtime.optimize import Objective
    from runtime.validate import Estimate


def _load(path: Path) -> tuple[Any, str | None]:
    try:
        text = path.read_text()
    except OSError as exc:
        return None, f"cannot read {path}: {exc.strerror or exc}"
    try:
        return yaml.safe_load(text), None
    except yaml.YAMLError as exc:
        return None, f"{path} is not valid YAML: {exc}"


def _format_issue(issue: Issue) -> str:
    line = f"{issue.severity.upper():7} {issue.field}: {issue.message} [{issue.code}]"
    return line + (f"\n        fix: {issue.fix}" if issue.fix else "")


def _print_issues(issues: list[Issue]) -> None:
    for issue in issues:
        print(_format_issue(issue))
    errors = sum(issue.is_error for issue in issues)
    print(f"{errors} error(s), {len(issues) - errors} warning(s)")


def _argv_lines(role: RolePlan) -> list[str]:
    """The entrypoint on the first line, then one flag with its values per line."""
    from runtime.catalog.flags import split_argv

    lines = [shlex.join(role.command)]
    for flag, values in split_argv(role.args):
        lines.append(shlex.join([flag, *values]))
    return lines


def _format_role(role: RolePlan) -> str:
    shape = f"{role.gpus_per_node} GPU(s) x {role.nodes_per_replica} node(s)"
    lines = [
        f"# {role.role}: {role.image}, {shape}, {role.replicas} replica(s), port {role.port}",
        " \\\n    ".join(_argv_lines(role)),
    ]
    if role.env:
        lines.insert(1, "# env: " + " ".join(f"{k}={v}" for k, v in role.env.items()))
    return "\n".join(lines)


def _format_estimate(est: Estimate) -> str:
    lines = [f"GPU {est.gpu}: {est.gpus_per_replica} per replica, {est.capacity_gib} GiB each"]
    for group in est.groups:
        if group.weights_gib is None:
            lines.append(f"  {group.role}: model architecture unknown, memory not estimated")
            continue
        lines.append(
            f"  {group.role}: weights {group.weights_gib} GiB + KV {group.kv_cache_gib} GiB + "
            + (f"LoRA adapters {group.adapters_gib} GiB + " if group.adapters_gib else "")
            + f"reserve {group.reserve_gib} GiB = {group.total_gib} GiB per GPU; "
            f"{group.max_concurrent_tokens} KV tokens per replica"
            + ("" if group.fits else "  (DOES NOT FIT)")
        )
    lines.append(
        f"GPUs {est.total_gpus_min}-{est.total_gpus_max}; cost ${est.cost_per_hour_min:.2f}-"
        f"${est.cost_per_hour_max:.2f}/hour at ${est.price_per_gpu_hour:.2f}/GPU-hour"
    )
    return "\n".join(lines)


def _plan_json(launch: LaunchPlan) -> str:
    return json.dumps(launch.model_dump(mode="json"), indent=2)


def run(command: str, path: Path, *, as_json: bool) -> int:
    from runtime.launch import plan
    from runtime.validate import check, estimate, has_errors

    data, problem = _load(path)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    spec, issues = check(data)
    if as_json and command == "validate":
        print(json.dumps([issue.as_dict() for issue in issues], indent=2))
    elif command == "validate" or has_errors(issues):
        _print_issues(issues)
    if spec is None or has_errors(issues):
        return 1
    if command == "plan":
        launch = plan(spec)
        print(_plan_json(launch) if as_json else "\n\n".join(map(_format_role, launch.roles)))
    elif command == "estimate":
        est = estimate(spec)
        print(est.model_dump_json(indent=2) if as_json else _format_estimate(est))
    return 0


def _optimize_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m runtime optimize",
        description="the cheapest configuration serving a traffic profile within its SLOs",
    )
    parser.add_argument("model", help="catalogue id or Hugging Face repo")
    parser.add_argument("--gpu", action="append", default=[], help="candidate GPU (repeat)")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, help="arrival rate, requests/s (default 1)")
    load.add_argument("--concurrency", type=int, help="users in flight")
    parser.add_argument("--input-tokens", type=int, default=1024)
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument("--prefix-share", type=float, default=0.0)
    parser.add_argument(
        "--working-set-tokens", type=int, default=0, help="prefix working set (HiCache past it)"
    )
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--ttft", type=float, default=1.0, help="TTFT p90 target, seconds")
    parser.add_argument(
        "--itl",
        type=float,
        default=None,
        help="ITL p90 target, seconds (default 0.05, or the mean target when only "
        "--tpot-mean-ms is given: the gaps are held at p90 unless a looser --itl says otherwise)",
    )
    parser.add_argument("--e2e", type=float, default=None, help="end-to-end p90 target, s")
    parser.add_argument(
        "--tpot-mean-ms",
        type=float,
        default=None,
        help="mean time-per-output-token target, ms (AIConfigurator's and Dynamo's TPOT)",
    )
    parser.add_argument(
        "--objective",
        choices=["cost", "throughput"],
        default="cost",
        help="cost: cheapest layout carrying the rate; throughput: most output tokens/s per "
        "GPU within the SLOs, sized to the GPU budget (--max-gpus, else one node)",
    )
    parser.add_argument("--max-cost", type=float, default=None, help="USD per hour")
    parser.add_argument("--max-gpus", type=int, default=None)
    parser.add_argument("--top", type=int, default=5, help="Pareto rows to print")
    parser.add_argument(
        "--confirm",
        action="store_true",
        help="run the top picks through the simulator (a short run in simulated time)",
    )
    parser.add_argument("--confirm-top", type=int, default=3, help="picks to confirm")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def run_optimize(argv: list[str]) -> int:
    from runtime.optimize import (
        Limits,
        OptimizeError,
        OptimizeRequest,
        Slo,
        Traffic,
        optimize,
        result_dict,
    )

    args = _optimize_parser().parse_args(argv)
    rate = args.rate if args.rate is not None or args.concurrency else 1.0
    request = OptimizeRequest(
        model=args.model,
        gpus=tuple(args.gpu),
        traffic=Traffic(
            input_tokens=args.input_tokens,
            output_tokens=args.output_tokens,
            rate_rps=rate,
            concurrency=args.concurrency,
            prefix_share=args.prefix_share,
            turns=args.turns,
            working_set_tokens=args.working_set_tokens,
        ),
        slo=Slo.targets(
            ttft_p90_s=args.ttft,
            itl_p90_s=args.itl,
            e2e_p90_s=args.e2e,
            tpot_mean_s=None if args.tpot_mean_ms is None else args.tpot_mean_ms / 1000,
        ),
        limits=Limits(max_cost_per_hour=args.max_cost, max_gpus=args.max_gpus),
        objective=args.objective,
    )
    if args.tpot_mean_ms is not None and args.tpot_mean_ms <= 0:
        print("optimize: --tpot-mean-ms must be positive", file=sys.stderr)
        return 2
    try:
        result = optimize(request)
    except OptimizeError as exc:
        print(f"optimize: {exc}", file=sys.stderr)
        return 2
    # The confirm path (the simulator's scheduler) is imported only when asked for: without
    # it the command answers in a fresh process well under a second.
    confirmed: Sequence[Confirmation] = ()
    if args.confirm:
        from runtime.confirm import ConfirmError, confirm_top

        try:
            confirmed = confirm_top(request, result, args.confirm_top)
        except ConfirmError as exc:
            print(f"optimize: {exc}", file=sys.stderr)
            return 2
    if args.json:
        data = result_dict(result)
        if args.confirm:
            from runtime.confirm import attach_measurements

            attach_measurements(data, confirmed, request.objective)
        print(json.dumps(data, indent=2))
        return 0 if result.best else 1
    print(f"load {result.rate_rps:.2f} req/s; {result.evaluated} configurations evaluated")
    for note in result.notes:
        print(f"note: {note}")
    if result.best is not None:
        heading = "cheapest" if args.objective == "cost" else "most tokens/s per GPU"
        print(f"\n{heading} meeting the SLOs: {result.best.label}")
        for reason in result.best.reasons:
            print(f"  - {reason}")
        print("  spec:\n    " + yaml.safe_dump(
            result.best.spec.model_dump(mode="json", exclude_defaults=True), sort_keys=False
        ).rstrip().replace("\n", "\n    "))  # fmt: skip
    print("\nwaterfall:")
    for step in result.waterfall:
        pick = step.candidate
        figure = f"${pick.prediction.cost_per_hour:.2f}/hour  {pick.label}" if pick else "none"
        if pick is not None and not pick.prediction.meets_slo:
            figure += "  (misses the SLOs)"  # the baseline: where the optimizations start
        print(f"  {step.step:15} {figure}")
    print("\nPareto front (cost, capacity, TTFT p90, ITL p90):")
    for cand in result.pareto[: args.top]:
        p = cand.prediction
        print(
            f"  ${p.cost_per_hour:8.2f}/h  {p.capacity_rps:8.2f} req/s  "
            f"{p.ttft_p90_s * 1000:7.0f} ms  {p.itl_p90_s * 1000:6.1f} ms  {cand.label}"
        )
    if confirmed:
        _print_confirmed(confirmed, request.objective)
    return 0 if result.best else 1


def _print_confirmed(confirmed: Sequence[Confirmation], objective: Objective) -> None:
    from runtime.confirm import confirmed_pick, measured_order

    print("\nconfirmed by a simulated run (predicted -> measured, simulated time), ranked by "
          "what the runs measured:")  # fmt: skip
    for item in sorted(confirmed, key=measured_order(objective)):
        p, m = item.candidate.prediction, item.measured
        verdict = "meets" if m.meets_slo else "MISSES"
        print(
            f"  {item.candidate.label}: TTFT p90 {p.ttft_p90_s * 1000:.0f} -> "
            f"{m.ttft_p90_s * 1000:.0f} ms, ITL p90 {p.itl_p90_s * 1000:.1f} -> "
            f"{m.itl_p90_s * 1000:.1f} ms, {p.output_tokens_per_s:.0f} -> "
            f"{m.output_tokens_per_s:.0f} tok/s, {m.completed}/{m.requests} done over "
            f"{m.simulated_s:.0f} s, e2e p90 {p.e2e_p90_s:.2f} -> {m.e2e_p90_s:.2f} s: "
            f"{verdict} the SLOs"
        )
    pick = confirmed_pick(confirmed, objective)
    if pick is None:
        print("  none met the SLOs when run without a warning of its own: the recommendation "
              "above is unconfirmed")  # fmt: skip
    elif pick is not confirmed[0]:
        print(f"  recommended instead: {pick.candidate.label}, first by the runs' figures "
              "(met the SLOs; cheapest or most tokens/s per GPU; then fastest)")  # fmt: skip
    else:
        print(f"  recommended: {pick.candidate.label} (confirmed)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["optimize"]:
        return run_optimize(argv[1:])
    if argv[:1] == ["quality"]:
        from runtime.quality_run import main as run_quality_gate

        return run_quality_gate(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m runtime", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["validate", "plan", "estimate", "optimize"])
    parser.add_argument("spec", type=Path, help="a RuntimeSpec as YAML or JSON")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    return run(args.command, args.spec, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
