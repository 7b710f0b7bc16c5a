"""Command line: `python -m runtime validate|plan|estimate SPEC.yaml`.

`validate` prints every issue and exits 1 when any is an error; `plan` prints the argv of each role
(refusing specs with errors); `estimate` prints the memory and cost figures. `--json` prints
machine-readable output instead.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import yaml

from runtime.catalog.flags import split_argv
from runtime.issues import Issue
from runtime.launch import LaunchPlan, RolePlan, plan
from runtime.validate import Estimate, check, estimate, has_errors


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
            f"reserve {group.reserve_gib} GiB = {group.total_gib} GiB per GPU; "
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["validate", "plan", "estimate"])
    parser.add_argument("spec", type=Path, help="a RuntimeSpec as YAML or JSON")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    return run(args.command, args.spec, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())
