"""A quantization run on the local cluster: the tool as a process of its own, on this machine.

The tool (``tools/quantize``, llmcompressor in a virtualenv of its own that
``scripts/quantize_env.sh`` builds once per machine and names) runs as ``python -m
plinth_quantize run --job JOB.json`` in the attempt's folder under the local run folder. Its
standard output (JSON-lines events) goes to ``events.jsonl``, its log to ``tool.log``, and a
small shell wrapper writes its exit status to ``exit-code`` when it ends, so a worker that
started it and then restarted still learns how it ended: the record on disk is the truth,
never the worker's memory. The process runs in a session of its own, so a worker's restart
does not take it down.

Paths in the job are the model cache's (``runtime.spec.MODEL_CACHE_PATH``); on this machine
that cache is ``model_cache_dir`` (``PLINTH_MODEL_CACHE_DIR``), where the local engines find
checkpoints too. A hub repository source is not downloaded here: the local cluster loads what
its cache holds (and tests run with ``HF_HUB_OFFLINE``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

from deployments.drivers import base
from deployments.drivers.errors import PermanentDriverError
from runtime.spec import MODEL_CACHE_PATH

REPO_ROOT = Path(__file__).resolve().parents[3]
ENV_SCRIPT = REPO_ROOT / "scripts" / "quantize_env.sh"
EVENTS = "events.jsonl"
LOG = "tool.log"
EXIT = "exit-code"
PID = "pid"
_TAIL_LINES = 15
# Runs the tool, then records its status; the command comes as arguments, never as text.
_WRAPPER = (
    'code=0; "$@" || code=$?; '
    'echo "$code" > "$PLINTH_EXIT_FILE.tmp"; mv "$PLINTH_EXIT_FILE.tmp" "$PLINTH_EXIT_FILE"'
)
# The processes this worker started, so their exit is collected (no zombie stays "alive").
_children: dict[int, subprocess.Popen[bytes]] = {}


def local_path(cache_path: str, model_cache_dir: Path) -> Path:
    """Where ``cache_path`` (under the model cache) is on this machine."""
    if cache_path != MODEL_CACHE_PATH and not cache_path.startswith(MODEL_CACHE_PATH + "/"):
        raise PermanentDriverError(f"{cache_path} is not in the model cache")
    return model_cache_dir / cache_path[len(MODEL_CACHE_PATH) :].lstrip("/")


def tool_python(configured: str) -> str:
    """The tool environment's Python: ``PLINTH_QUANTIZE_PYTHON``, else what the build script
    names (it builds the environment first if this machine has none)."""
    if configured:
        return configured
    try:
        done = subprocess.run(
            [str(ENV_SCRIPT)], capture_output=True, text=True, check=True, timeout=3600
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise PermanentDriverError(f"the quantization tool environment is missing: {exc}") from exc
    return done.stdout.strip().splitlines()[-1]


def attempt_dir(run_dir: Path, job: base.QuantizationJob) -> Path:
    return run_dir / "quantize" / job.name


def start(job: base.QuantizationJob, *, run_dir: Path, model_cache_dir: Path, python: str) -> None:
    """Start ``job``'s attempt as a process, unless its folder says it was started."""
    folder = attempt_dir(run_dir, job)
    if (folder / PID).is_file():
        return
    if job.source_repo:
        raise PermanentDriverError(
            "the local cluster quantizes models from its model cache only; "
            f"{job.source_repo} is a hub repository"
        )
    folder.mkdir(parents=True, exist_ok=True)
    spec = _local_job(job, folder, model_cache_dir)
    (folder / "job.json").write_text(json.dumps(spec, indent=1))
    command = [python, "-m", "plinth_quantize", "run", "--job", str(folder / "job.json")]
    with (folder / EVENTS).open("wb") as out, (folder / LOG).open("wb") as log:
        child = subprocess.Popen(
            ["/bin/sh", "-c", _WRAPPER, "quantize", *command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=log,
            cwd=folder,
            env=_tool_env(folder),
            start_new_session=True,
        )
    _children[child.pid] = child
    (folder / PID).write_text(str(child.pid))


def _local_job(job: base.QuantizationJob, folder: Path, cache: Path) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(json.dumps(job.job))
    spec["source_path"] = str(local_path(spec["source_path"], cache))
    spec["output_dir"] = str(local_path(spec["output_dir"], cache))
    if job.calibration:
        path = folder / "calibration.jsonl"
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in job.calibration))
        spec["calibration"] = {**spec["calibration"], "path": str(path)}
    return spec


def _tool_env(folder: Path) -> dict[str, str]:
    # The worker's own environment holds its settings and secrets: the tool gets only these
    # (and OMP_NUM_THREADS, where an operator bounds torch's threads on a shared machine).
    passed = {"PATH", "HOME", "LANG", "TMPDIR", "OMP_NUM_THREADS"}
    kept = {k: v for k, v in os.environ.items() if k in passed}
    return {
        **kept,
        "PYTHONPATH": f"{REPO_ROOT / 'tools' / 'quantize'}:{REPO_ROOT}",
        "HF_HUB_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "",  # the local cluster quantizes on the CPU
        "PLINTH_EXIT_FILE": str(folder / EXIT),
    }


def read(
    job: base.QuantizationJob, *, run_dir: Path, model_cache_dir: Path
) -> base.QuantizationProgress:
    """What the attempt printed, and its state from its exit file and its process."""
    folder = attempt_dir(run_dir, job)
    output = str(local_path(job.job["output_dir"], model_cache_dir))
    if not (folder / PID).is_file():
        return base.QuantizationProgress(base.QUANTIZE_GONE, output_dir=output)
    lines = tuple(_complete_lines(folder / EVENTS))
    code = _exit_code(folder)
    alive = code is None and _alive(int((folder / PID).read_text()))
    code = code if code is not None or alive else _exit_code(folder)  # it may just have ended
    if code is None:
        state = base.QUANTIZE_RUNNING if alive else base.QUANTIZE_GONE
        message = "" if alive else "the tool's process ended without a status" + _tail(folder)
        return base.QuantizationProgress(state, lines, message, output)
    if code == 0:
        return base.QuantizationProgress(base.QUANTIZE_SUCCEEDED, lines, "", output)
    return base.QuantizationProgress(
        base.QUANTIZE_FAILED, lines, f"the tool exited with status {code}{_tail(folder)}", output
    )


def remove(job: base.QuantizationJob, *, run_dir: Path) -> bool:
    """Stop the attempt's process group; its folder (events, log) is kept for the record."""
    folder = attempt_dir(run_dir, job)
    if not (folder / PID).is_file() or _exit_code(folder) is not None:
        return True
    pid = int((folder / PID).read_text())
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    return not _alive(pid)


def _complete_lines(path: Path) -> list[str]:
    """The finished lines of ``path`` (a line still being written is read next time)."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [line for line in text.split("\n")[:-1] if line.strip()]


def _exit_code(folder: Path) -> int | None:
    try:
        return int((folder / EXIT).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid: int) -> bool:
    child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has ended


def _tail(folder: Path) -> str:
    try:
        lines = (folder / LOG).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    keep = [line for line in lines if line.strip()][-_TAIL_LINES:]
    return (":\n" + "\n".join(keep)) if keep else ""
