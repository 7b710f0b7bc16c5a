"""The reference performance models the benches compare runtime/perf with, each in its own venv.

NVIDIA AIConfigurator 0.12 and its successor aisimulate 0.13 (~850 MB each) are never Plinth
dependencies: ``ensure`` creates a venv per reference under ``bench/.venvs/`` (git-ignored) and
installs the pinned package once; the benches ask them in subprocesses through the CLI API both
share (``cli_estimate``, ``cli_default``, ``cli_exp``). Answers depend only on the pinned version
and the question, so they are kept in the reference's venv as they come: ``query_reference``
for bench/calibration.py's step times, ``ask`` for bench/optimizer.py's searches and pricings.
aisimulate 0.13.0 itself is a placeholder on PyPI that fetches its wheel from pypi.nvidia.com;
``AIS_VERSION`` pins the last 0.13.0 pre-release whose wheel PyPI itself serves.
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

AIC_VERSION = "0.12.0"
AIC_VENV = REPO / "bench" / ".venvs" / "aiconfigurator"
# aisimulate 0.13.0 on PyPI is a placeholder sdist that downloads its wheel from pypi.nvidia.com;
# this is the last 0.13.0 pre-release whose wheel PyPI itself serves (2026-10-20; 0.13.0: 10-21).
AIS_VERSION = "0.13.0.dev202610200000000077"


@dataclass(frozen=True)
class Reference:
    """One reference tool: its pinned package, its own venv, and the module of its CLI API."""

    name: str
    requirement: str
    module: str  # exposes cli_estimate (and cli_default / cli_exp) as AIConfigurator 0.12's does
    venv: Path


AIC = Reference("AIC 0.12", f"aiconfigurator=={AIC_VERSION}", "aiconfigurator.cli.api", AIC_VENV)
AIS = Reference(
    "AIS 0.13", f"aisimulate=={AIS_VERSION}", "aisimulate.legacy_cli.api",
    REPO / "bench" / ".venvs" / "aisimulate",
)  # fmt: skip
REFERENCES = (AIC, AIS)


def ensure(reference: Reference) -> Path:
    """The reference venv's python, creating the venv and installing the pinned tool once."""
    python = reference.venv / "bin" / "python"
    if not python.exists():
        print(f"creating {reference.venv} with {reference.requirement} (~850 MB, once)")
        venv.create(reference.venv, with_pip=True)
    probe = subprocess.run([python, "-c", f"import {reference.module}"], capture_output=True)
    if probe.returncode != 0:
        pip = [str(python), "-m", "pip", "install", "-q", reference.requirement]
        subprocess.run(pip, check=True)
    return python


def ensure_aic() -> Path:
    return ensure(AIC)


def query_reference(
    reference: Reference, python: Path, requests: list[dict[str, object]]
) -> list[dict[str, object]]:
    """The reference's answer for each point. Answers depend only on the pinned version and the
    point, so they are kept in its venv as they come: a rerun after a catalogue edit, or after
    an interrupted run, asks only for the points it has no answer for."""
    cache_file = reference.venv / "answers.json"
    cache: dict[str, dict[str, object]] = {}
    if cache_file.exists():
        cache = json.loads(cache_file.read_text())
    pin = reference.requirement
    keys = [json.dumps({**q, "ref": pin}, sort_keys=True) for q in requests]
    missing = sorted({key: i for i, key in enumerate(keys) if key not in cache}.values())
    if missing:
        print(f"asking {reference.name} for {len(missing)} points", file=sys.stderr)
        answers = _run_reference(reference, python, [requests[i] for i in missing])
        fresh: dict[str, dict[str, object]] = {}
        for done, (i, answer) in enumerate(zip(missing, answers, strict=True)):
            fresh[keys[i]] = cache[keys[i]] = answer
            if done % 10 == 9:
                _keep(cache_file, fresh)
        _keep(cache_file, fresh)
    return [cache[key] for key in keys]


def _keep(cache_file: Path, fresh: dict[str, dict[str, object]]) -> None:
    """Add `fresh` answers to the kept ones (re-read first: another run may have added some)."""
    kept = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    cache_file.write_text(json.dumps({**kept, **fresh}))


def _run_reference(
    reference: Reference, python: Path, requests: list[dict[str, object]]
) -> Iterator[dict[str, object]]:
    """The reference's answers, one per point, as its worker prints them."""
    worker = subprocess.Popen(
        [python, "-c", _ESTIMATE_WORKER.replace("MODULE", reference.module)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    worker.stdin.write(json.dumps(requests))
    worker.stdin.close()
    for line in worker.stdout:
        if line.startswith("{"):
            yield json.loads(line)
    if worker.wait() != 0:
        raise SystemExit(f"{reference.name} worker failed ({worker.returncode})")


# Runs inside a reference venv (MODULE: its CLI API): reads a JSON list of points, prints one
# JSON answer (ms, or an error) per line.
_ESTIMATE_WORKER = r"""
import json, logging, sys, warnings
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
import MODULE as api
resolve = api.resolve_model_config_moe_comm
def deepep(ep):
    # The DeepEP path the reference's own search prices pure EP on one node with (cli_estimate
    # keeps intra-node EP on the fused MoE): its resolver, given the coverage its search finds.
    covered = {"context": {"deepep_ht": {ep}}, "generation": {"deepep_ll": {ep}}}
    return lambda config, **kw: resolve(config, **{**kw, "coverage_snapshot": covered})
for p in json.load(sys.stdin):
    api.resolve_model_config_moe_comm = deepep(p["moe_ep"]) if p.get("a2a") else resolve
    try:
        moe = {}  # dense points name no expert layout
        if "moe_ep" in p:
            moe = {"attention_dp_size": p["dp"], "moe_tp_size": p.get("moe_tp", 1),
                   "moe_ep_size": p["moe_ep"]}
        r = api.cli_estimate(p["model"], p["system"], mode=p["mode"], backend_name="sglang",
                         isl=p["isl"], osl=2, batch_size=p["batch"], tp_size=p["tp"],
                         gemm_quant_mode=p["gemm"], kvcache_quant_mode=p["kv"], stride=1, **moe)
        out = {"ms": r.ttft if p["mode"] == "static_ctx" else r.tpot,
               "version": r.backend_version}
    except Exception as exc:  # a point outside its data: reported, not fatal
        out = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
    print(json.dumps(out), flush=True)  # one line per point: the caller keeps each as it comes
"""


# Runs inside a reference venv (MODULE: its CLI API): one job (JSON on stdin), one JSON answer
# on stdout.
_CLI_WORKER = r"""
import json, logging, sys, time, warnings
started = time.perf_counter()
logging.disable(logging.CRITICAL)
warnings.filterwarnings("ignore")
from MODULE import cli_default, cli_estimate, cli_exp
job = json.load(sys.stdin)
KEEP = ("tokens/s/gpu", "ttft", "tpot", "bs", "tp", "dp", "moe_tp", "moe_ep", "gemm", "kvcache",
        "(p)tp", "(p)dp", "(p)workers", "(p)bs", "(p)gemm", "(p)kvcache", "(d)tp", "(d)dp",
        "(d)workers", "(d)bs", "(d)gemm", "(d)kvcache", "num_total_gpus", "(p)moe_tp",
        "(p)moe_ep", "(d)moe_tp", "(d)moe_ep")
def rows(result):
    out = {}
    for name, frame in result.best_configs.items():
        if frame is not None and len(frame):
            row = frame.iloc[0].to_dict()
            out[name] = {k: (v.item() if hasattr(v, "item") else v)
                         for k, v in row.items() if k in KEEP}
    return out
answer = {"import_s": time.perf_counter() - started}
t0 = time.perf_counter()
try:
    if job["op"] == "search":
        r = cli_default(job["model"], job["gpus"], job["system"], backend="sglang",
                        isl=job["isl"], osl=job["osl"], ttft=job["ttft"], tpot=job["tpot"],
                        top_n=1)
        answer.update(chosen=r.chosen_exp, picks=rows(r))
    elif job["op"] == "disagg":
        # These exact pools; the decode batch is the one free knob (TPOT grows with it).
        best = None
        for batch in (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512):
            try:
                r = cli_estimate(job["model"], job["system"], mode="disagg",
                                 backend_name="sglang", isl=job["isl"], osl=job["osl"],
                                 decode_batch_size=batch, prefill_batch_size=1, **job["pools"])
            except Exception as exc:  # past the KV memory: the batch before was the last
                answer["stopped"] = f"batch {batch}: {type(exc).__name__}"
                break
            if r.tpot > job["tpot"]:
                break
            if r.ttft <= job["ttft"] and (best is None or r.tokens_per_second_per_gpu > best):
                best = r.tokens_per_second_per_gpu
        answer["picks"] = {} if best is None else {"pin": {"tokens/s/gpu": best}}
    else:
        r = cli_exp(config={"pin": job["config"]}, top_n=1)
        answer.update(picks=rows(r))
except Exception as exc:
    answer["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
answer["search_s"] = time.perf_counter() - t0
print(json.dumps(answer))
"""


@dataclass(frozen=True)
class Tool:
    """A reference with its venv's python: answers are kept per job in its venv (they depend
    only on the pinned version and the job), so a rerun after a physics change asks only for
    Plinth's new picks; a kept answer's search seconds are those of the run that asked it."""

    reference: Reference
    python: Path

    @property
    def name(self) -> str:
        return self.reference.name


def ask(tool: Tool, job: dict[str, Any]) -> dict[str, Any]:
    cache_file = tool.reference.venv / "optimizer_answers.json"
    cache: dict[str, dict[str, Any]] = {}
    if cache_file.exists():
        cache = json.loads(cache_file.read_text())
    key = json.dumps({**job, "ref": tool.reference.requirement}, sort_keys=True)
    if key in cache:
        return cache[key]
    worker = _CLI_WORKER.replace("MODULE", tool.reference.module)
    done = subprocess.run(
        [tool.python, "-c", worker], input=json.dumps(job), capture_output=True, text=True
    )
    if done.returncode != 0 or not done.stdout.strip():
        return {"error": (done.stderr.strip().splitlines() or ["no answer"])[-1][:160]}
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if "error" not in answer:
        cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
        cache[key] = answer
        cache_file.write_text(json.dumps(cache))
    return answer
