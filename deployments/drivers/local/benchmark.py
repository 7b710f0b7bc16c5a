"""A benchmark on the local cluster: each load point an AIPerf subprocess from the tools
environment, one after the other.

The tools environment (``deployments.drivers.local.tools_env``) is made on first use, under a file
lock, so the first benchmark of an installation waits a couple of minutes for it. AIPerf writes its
artifacts (``profile_export_aiperf.json``, its log) into a directory of the benchmark's, which the
caller keeps. A run that fails or overruns raises ``PermanentDriverError`` with the tail of AIPerf's
log (never a line naming ``--api-key``).

AIPerf reads the benchmark's temporary key from ``--api-key`` only (its ``${VAR}`` substitution
is for config files), and a command line is readable by every local user: as for engines
(``runtime.secret_flags``), the key travels in the environment and the command line says
``--api-key $(PLINTH_API_KEY)``. That module is run by its path with the tools environment's
Python and ``-P``, so no module of Plinth's can shadow one of AIPerf's.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deployments.aiperf import EXPORT_FILE, TOKENIZER_DIR, aiperf_env, filled
from deployments.drivers.base import BenchmarkRun
from deployments.drivers.errors import PermanentDriverError
from deployments.drivers.local.tools_env import ensure_aiperf
from runtime import secret_flags

LOG_FILE = "aiperf-stdout.log"
_TAIL_LINES = 15


def run_points(
    run: BenchmarkRun, on_point: Callable[[int, dict[str, Any]], None], *, tools_dir: Path
) -> None:
    """Run ``run``'s points in order, each in its own artifact folder; each export to
    ``on_point`` as soon as its point ends."""
    for index, point in enumerate(run.points):
        point_dir = Path(run.artifact_dir) / point.name
        argv = filled(
            point.argv,
            api_key=run.api_key,
            tokenizer=str(TOKENIZER_DIR),
            artifact_dir=str(point_dir),
        )
        export = run_aiperf(argv, point_dir, tools_dir=tools_dir, timeout_s=run.point_timeout_s)
        on_point(index, json.loads(export.read_text()))


def run_aiperf(argv: list[str], artifact_dir: Path, *, tools_dir: Path, timeout_s: float) -> Path:
    """Run ``aiperf <argv>`` to completion; the export file it wrote."""
    executable = ensure_aiperf(tools_dir)
    artifact_dir.mkdir(parents=True, exist_ok=True)
    log = artifact_dir / LOG_FILE
    command, key_env = keyed_command(executable, argv)
    with log.open("wb") as out:
        try:
            done = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**aiperf_env(os.environ), **key_env},
                cwd=artifact_dir,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise PermanentDriverError(
                f"AIPerf ran past {timeout_s:.0f} s and was stopped{_tail(log)}"
            ) from exc
    export = artifact_dir / EXPORT_FILE
    if done.returncode != 0 or not export.is_file():
        raise PermanentDriverError(f"AIPerf exited with status {done.returncode}{_tail(log)}")
    return export


def keyed_command(executable: Path, argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command that runs ``executable argv`` with its ``--api-key`` value off the command
    line, and the environment that carries that value."""
    if "--api-key" not in argv[:-1]:
        return [str(executable), *argv], {}
    at = argv.index("--api-key") + 1
    shown = [*argv[:at], secret_flags.API_KEY_REF, *argv[at + 1 :]]
    python = executable.with_name("python")
    command = [str(python), "-P", secret_flags.__file__, str(executable), *shown]
    return command, {secret_flags.API_KEY_ENV: argv[at]}


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    keep = [line for line in lines if line.strip() and "--api-key" not in line][-_TAIL_LINES:]
    return (":\n" + "\n".join(keep)) if keep else ""
