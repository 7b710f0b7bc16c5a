"""The local driver: each engine replica a process (the SGLang simulator by default), smg in front.

Processes are named ``r<revision>-<role>-<index>`` and ``router``; their records and logs live in
``<run_dir>/<deployment id>/`` (see ``processes``). ``apply`` is one idempotent step: start the
revision's missing or dead engines, stop other revisions' engines only as this revision's become
ready (surge; applying the previous revision again is the rollback), scale down extra replicas,
keep the router running and its worker list equal to the ready engines.

The endpoint's API key (``ref.api_key``) guards its engines and router here too: on a shared
machine any local process (or a web page, by DNS rebinding) can reach a loopback port. SGLang and
smg read the key from argv only, and a command line is readable by every local user, so a keyed
process is started through ``runtime.secret_flags`` as a Kubernetes container is: the key in its
environment (readable by its own user only), ``--api-key $(PLINTH_API_KEY)`` on its command
line, the value put in place inside the process. smg is handed the key for each worker it is
told to add (it sends a worker no key of its own otherwise). A benchmark runs AIPerf point by
point as a process from the tools environment (``local.benchmark``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, tzinfo
from pathlib import Path
from typing import Any

from deployments.drivers import base
from deployments.drivers.errors import PermanentDriverError, TemporaryDriverError
from deployments.drivers.local import adapters, quantize, warm
from deployments.drivers.local.benchmark import run_points
from deployments.drivers.local.logfile import read_log
from deployments.drivers.local.processes import ProcessRecord, ProcessTable, free_port
from runtime import startup
from runtime.client import EngineClient, RouterClient, RuntimeUnavailable
from runtime.launch import RolePlan, with_flag
from runtime.lora_live import LoraLiveChange
from runtime.secret_flags import API_KEY_ENV, API_KEY_REF

REPO_ROOT = Path(__file__).resolve().parents[3]
ROUTER = "router"


@dataclass(frozen=True)
class LocalOptions:
    run_dir: Path
    engine: str = "sim"  # "sim": python -m runtime.sim; "sglang": sglang.launch_server (GPU)
    python: str = sys.executable
    smg: str = ""
    router_health_check_s: int = 2
    stop_grace_s: float = 5.0
    # Extra environment for engines, e.g. PLINTH_SIM_TIME_SCALE for fast simulated runs.
    env: dict[str, str] = field(default_factory=dict)
    # Where the tools environment (AIPerf, for benchmarks) lives: PLINTH_TOOLS_DIR.
    tools_dir: Path | None = None
    # Where the model cache (runtime.spec.MODEL_CACHE_PATH) is on this machine, and the
    # quantization tool's Python ("": scripts/quantize_env.sh names it): local.quantize.
    model_cache_dir: Path | None = None
    quantize_python: str = ""


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _key_env(api_key: str) -> dict[str, str]:
    """Where a keyed process finds the value its ``--api-key $(PLINTH_API_KEY)`` stands for."""
    return {API_KEY_ENV: api_key} if api_key else {}


def _key_digest(api_key: str) -> str:
    """Stands for the key in a config hash: a new key restarts engines, the record keeps none."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:16] if api_key else ""


class _RouterExited(TemporaryDriverError):
    """The router process was gone before it answered."""


class LocalDriver:
    def __init__(self, options: LocalOptions) -> None:
        self.options = options

    def close(self) -> None:
        """Nothing to release: processes outlive the driver on purpose."""

    def run_benchmark(
        self, run: base.BenchmarkRun, on_point: Callable[[int, dict[str, Any]], None]
    ) -> None:
        """Each point as an AIPerf process from the tools environment (``local.benchmark``)."""
        if self.options.tools_dir is None:
            raise PermanentDriverError("the local driver was given no tools folder for AIPerf")
        run_points(run, on_point, tools_dir=self.options.tools_dir)

    # --- quantization (local.quantize) ---

    def _model_cache(self) -> Path:
        if self.options.model_cache_dir is None:
            raise PermanentDriverError("the local driver was given no model cache folder")
        return self.options.model_cache_dir

    def start_quantization(self, job: base.QuantizationJob) -> None:
        python = quantize.tool_python(self.options.quantize_python)
        quantize.start(
            job, run_dir=self.options.run_dir, model_cache_dir=self._model_cache(), python=python
        )

    def read_quantization(
        self, job: base.QuantizationJob, after: str = ""
    ) -> base.QuantizationProgress:
        """Every line each time (``after`` unused): a local file, read where it lies."""
        return quantize.read(job, run_dir=self.options.run_dir, model_cache_dir=self._model_cache())

    def remove_quantization(self, job: base.QuantizationJob) -> bool:
        return quantize.remove(job, run_dir=self.options.run_dir)

    def _table(self, ref: base.DeploymentRef) -> ProcessTable:
        return ProcessTable(self.options.run_dir / ref.id)

    # --- apply ---

    def apply_adapters(
        self,
        ref: base.DeploymentRef,
        serving: int,
        number: int,
        change: LoraLiveChange,
    ) -> bool:
        """Live, through each engine's load and unload routes (``local.adapters``)."""
        adapters.apply_adapters(self._table(ref), serving, number, change, ref.api_key)
        return True

    def apply(self, ref: base.DeploymentRef, revision: base.RevisionPlan) -> None:
        table = self._table(ref)
        records = table.records()
        self._finish_stops(table, records)
        live = [r for r in records if r.stopping_since is None]
        key = ref.api_key
        desired, kept_warm = self._ensure_engines(table, revision, live, key)
        router = self._ensure_router(table, revision, live, key)
        engines = {r.name: r for r in [*live, *desired] if r.role != ROUTER}
        warm_names = {r.name for r in kept_warm}
        ready = {name for name, r in engines.items() if _ready(r)} - warm_names
        try:
            routed = self._sync_router(router, [engines[n] for n in sorted(ready)], key)
        except _RouterExited:
            # Most often another process took its port between free_port() and smg binding
            # it: once more on new ports, in this pass, before the next pass's retry.
            router = self._ensure_router(table, revision, [router, *live], key)
            routed = self._sync_router(router, [engines[n] for n in sorted(ready)], key)
        # Out of the router first, so no request reaches a replica whose memory is leaving.
        for record in kept_warm:
            warm.release(table, record, key)
        # Old engines retire only once new ones are routed, and leave the router before SIGTERM.
        retiring = self._retiring(revision, list(engines.values()), desired, routed, warm_names)
        if retiring:
            names = {r.name for r in retiring}
            self._sync_router(router, [engines[n] for n in sorted(ready - names)], key)
        for record in retiring:
            table.terminate(record, self.options.stop_grace_s)

    def _finish_stops(self, table: ProcessTable, records: list[ProcessRecord]) -> None:
        for record in records:
            if record.stopping_since is not None:
                table.terminate(record, self.options.stop_grace_s)

    def _engine_roles(self, revision: base.RevisionPlan) -> list[tuple[RolePlan, int]]:
        roles = [r for r in revision.plan.roles if r.role != "router"]
        return [(r, revision.replicas_of(r)) for r in roles]

    def _ensure_engines(
        self,
        table: ProcessTable,
        revision: base.RevisionPlan,
        live: list[ProcessRecord],
        api_key: str,
    ) -> tuple[list[ProcessRecord], list[ProcessRecord]]:
        """(the replicas the revision runs, started where missing and resumed where released;
        the running ones beyond its count that its warm pool keeps rather than stops)."""
        by_name = {r.name: r for r in live}
        desired: list[ProcessRecord] = []
        kept_warm: list[ProcessRecord] = []
        for role, replicas in self._engine_roles(revision):
            pool = revision.warm_replicas if role.role == "engine" else 0
            for index in range(replicas + pool):
                name = f"r{revision.number}-{role.role}-{index}"
                record = by_name.get(name)
                if index >= replicas:
                    # Only a replica that already runs is kept warm: none is started for it.
                    if record is not None and record.alive():
                        kept_warm.append(record)
                    continue
                if record is not None and record.alive():
                    desired.append(warm.resume(table, record, api_key))
                    continue
                restarts = record.restarts + 1 if record is not None else 0
                desired.append(self._start_engine(table, name, revision, role, restarts, api_key))
        return desired, kept_warm

    def _start_engine(
        self,
        table: ProcessTable,
        name: str,
        revision: base.RevisionPlan,
        role: RolePlan,
        restarts: int,
        api_key: str,
    ) -> ProcessRecord:
        port = free_port()
        argv = self.engine_argv(role, port, api_key)
        bootstrap = 0
        if role.role == "prefill":
            # Each prefill process gets its own KV bootstrap port: a pool of several shares this
            # host, and the router passes each request the port of the prefill it chose.
            bootstrap = free_port()
            argv = with_flag(argv, "--disaggregation-bootstrap-port", bootstrap)
        env = {**_SIM_DEFAULTS, **_inherited_env(), **self.options.env, **role.env}
        env.update(_identity(table, name))
        env.update({"PYTHONPATH": str(REPO_ROOT), **_key_env(api_key)})
        if revision.hf_token:
            # A gated model's token: in the environment only, never in argv, which the log's
            # first line and every process listing show.
            env[base.HF_TOKEN_ENV] = revision.hf_token
        record = ProcessRecord(
            name=name,
            role=role.role,
            revision=revision.number,
            pid=0,
            port=port,
            start_ticks=0,
            config=_digest(role.args, role.env, _key_digest(api_key)),
            started_at=0.0,
            extra_port=bootstrap,
            restarts=restarts,
        )
        return table.spawn(record, argv, env, table.root)

    def engine_argv(self, role: RolePlan, port: int, api_key: str = "") -> list[str]:
        """The command line of one engine process: the plan's argv, on loopback at ``port``,
        demanding ``api_key`` when there is one."""
        args = with_flag(with_flag(role.args, "--host", "127.0.0.1"), "--port", port)
        args = self._cached_model(args)
        if not api_key:
            return [self.options.python, "-m", self._engine_module(), *args]
        args = with_flag(args, "--api-key", API_KEY_REF)  # the value is in the environment
        return [*self._keyed(), "-m", self._engine_module(), *args]

    def _cached_model(self, args: list[str]) -> list[str]:
        """``args`` loading a model cache path from this machine's cache folder, where it holds
        that path (a checkpoint the quantization tool wrote); the name served stays the path."""
        at = args.index("--model-path") + 1 if "--model-path" in args[:-1] else 0
        if not at or self.options.model_cache_dir is None:
            return args
        try:
            found = quantize.local_path(args[at], self.options.model_cache_dir)
        except PermanentDriverError:
            return args  # a hub repository id
        if not found.is_dir():
            return args
        named = args if "--served-model-name" in args else [*args, "--served-model-name", args[at]]
        return with_flag(named, "--model-path", str(found))

    def _engine_module(self) -> str:
        if self.options.engine == "sim":
            return "runtime.sim"
        if self.options.engine == "sglang":
            if importlib.util.find_spec("sglang") is None:
                raise PermanentDriverError(
                    "PLINTH_LOCAL_ENGINE=sglang, but SGLang is not installed for this Python"
                )
            return "sglang.launch_server"
        raise PermanentDriverError(f"unknown local engine {self.options.engine!r}: sim or sglang")

    def _keyed(self) -> list[str]:
        """The start of the command line of a process whose ``--api-key`` is a reference."""
        return [self.options.python, "-m", "runtime.secret_flags"]

    def _retiring(
        self,
        revision: base.RevisionPlan,
        engines: list[ProcessRecord],
        desired: list[ProcessRecord],
        routed: set[str],
        kept_warm: set[str],
    ) -> list[ProcessRecord]:
        """What the revision does not want: other revisions' engines beyond those still covering
        for new ones not yet routed, extra replicas of this one beyond its warm pool, roles it
        no longer has."""
        wanted = {r.name for r in desired} | kept_warm
        plan_roles = self._engine_roles(revision)
        retiring = [r for r in engines if r.role not in {role.role for role, _ in plan_roles}]
        for role, replicas in plan_roles:
            new_routed = sum(1 for r in desired if r.role == role.role and r.url in routed)
            keep = max(0, replicas - new_routed)
            others = [r for r in engines if r.role == role.role and r.name not in wanted]
            # Routed old engines first: they are the ones worth keeping.
            others.sort(key=lambda r: (r.revision == revision.number, r.url not in routed))
            for index, record in enumerate(others):
                if index >= keep or record.revision == revision.number or not record.alive():
                    retiring.append(record)
        return retiring

    # --- router ---

    def _router_args(self, revision: base.RevisionPlan, api_key: str = "") -> list[str]:
        router = revision.plan.role("router")
        args = list(router.args) if router else []
        if api_key:
            args = with_flag(args, "--api-key", API_KEY_REF)  # the value is in the environment
        args = with_flag(args, "--host", "127.0.0.1")
        args = with_flag(args, "--prometheus-host", "127.0.0.1")
        args = with_flag(args, "--health-check-interval-secs", self.options.router_health_check_s)
        # smg waits 180 s for in-flight requests by default; stop must not outlast its grace.
        return with_flag(args, "--shutdown-grace-period-secs", int(self.options.stop_grace_s))

    def router_argv(
        self, revision: base.RevisionPlan, port: int, metrics_port: int, api_key: str = ""
    ) -> list[str]:
        """The command line of the router process, serving on ``port``."""
        args = self._router_args(revision, api_key)
        args = with_flag(with_flag(args, "--port", port), "--prometheus-port", metrics_port)
        smg = [self.options.smg or _smg_binary(), "launch"]
        return [*self._keyed(), *smg, *args] if api_key else [*smg, *args]

    def _ensure_router(
        self,
        table: ProcessTable,
        revision: base.RevisionPlan,
        live: list[ProcessRecord],
        api_key: str,
    ) -> ProcessRecord:
        args = self._router_args(revision, api_key)
        config = _digest(args, _key_digest(api_key))  # argv names the key, not its value
        current = next((r for r in live if r.role == ROUTER), None)
        if current is not None and current.alive() and current.config == config:
            return current
        restarts = 0
        if current is not None:
            restarts = current.restarts + (0 if current.config != config else 1)
        # One record per router: a router still on its way out (this one, or one a stop left
        # behind) is gone before its record is reused, or it would run on with none.
        for old in (r for r in table.records() if r.role == ROUTER):
            if not table.terminate(old, self.options.stop_grace_s):
                table.kill(old)
        port, metrics_port = free_port(), free_port()
        argv = self.router_argv(revision, port, metrics_port, api_key)
        record = ProcessRecord(
            name=ROUTER,
            role=ROUTER,
            revision=revision.number,
            pid=0,
            port=port,
            start_ticks=0,
            config=config,
            started_at=0.0,
            extra_port=metrics_port,
            restarts=restarts,
        )
        env = {**_inherited_env(), "HF_HUB_OFFLINE": "1", **_identity(table, ROUTER)}
        env.update({"PYTHONPATH": str(REPO_ROOT), **_key_env(api_key)})
        return table.spawn(record, argv, env, table.root)

    def _sync_router(
        self, router: ProcessRecord, engines: Iterable[ProcessRecord], api_key: str
    ) -> set[str]:
        """Make smg's worker list the ready engines: add the new, remove the gone. Returns the
        URLs it routed to (healthy) before this call's changes."""
        with RouterClient(router.url, timeout=2.0, api_key=api_key) as client:
            if not _wait(client.live, 10.0):
                if not router.alive():
                    raise _RouterExited("the router exited right after starting")
                raise TemporaryDriverError("the router is not answering yet")
            try:
                registered = {w.get("url"): w for w in client.workers()}
                wanted = {e.url: e for e in engines}
                for url, engine in wanted.items():
                    if url not in registered:
                        extra: dict[str, str | int] = (
                            {} if engine.role == "engine" else {"worker_type": engine.role}
                        )
                        if engine.role == "prefill" and engine.extra_port:
                            extra["bootstrap_port"] = engine.extra_port
                        if api_key:
                            extra["api_key"] = api_key  # what smg sends the worker
                        client.add_worker(url, **extra)
                for known, worker in registered.items():
                    if known not in wanted and worker.get("id"):
                        client.remove_worker(str(worker["id"]))
            except RuntimeUnavailable as exc:
                raise TemporaryDriverError(f"router worker update failed: {exc}") from exc
        return {str(u) for u, w in registered.items() if w.get("is_healthy", True)}

    # --- observe ---

    def observe(self, ref: base.DeploymentRef) -> base.Observation:
        records = self._table(ref).records()
        router = next((r for r in records if r.role == ROUTER and r.stopping_since is None), None)
        router_url, router_ready, routed = _router_state(router, ref.api_key)
        facts: list[base.ReplicaFacts] = []
        events: list[base.ObservedEvent] = []
        for record in records:
            if record.role == ROUTER:
                continue
            fact = _engine_facts(record, routed)
            facts.append(fact)
            events.extend(warm.events(record))
            if fact.reason == "Exited":
                key = f"local:{record.name}:{record.pid}:exit"
                events.append(base.ObservedEvent("EngineExited", fact.message, "warning", key))
        return base.Observation(
            replicas=tuple(facts),
            router_url=router_url,
            router_ready=router_ready,
            events=tuple(events),
        )

    # --- stop / delete / logs ---

    def stop(self, ref: base.DeploymentRef) -> bool:
        table = self._table(ref)
        done = [table.terminate(r, self.options.stop_grace_s) for r in table.records()]
        return all(done)

    def delete(self, ref: base.DeploymentRef) -> bool:
        if not self.stop(ref):
            return False
        shutil.rmtree(self._table(ref).root, ignore_errors=True)
        return True

    def logs(self, ref: base.DeploymentRef, query: base.LogQuery) -> base.LogLines:
        """One process' log file. Every run of a process appends to it (each run begins with a
        ``--- starting`` line), so there is no separate previous log to read."""
        table = self._table(ref)
        sources = tuple(_log_source(name) for name in table.log_names())
        source = base.pick_source(sources, query)
        if source is None:
            return base.LogLines(replica="", replicas=sources)
        try:
            found = read_log(
                table.log_path(source.name),
                tail=query.tail,
                after=query.after,
                since=query.since,
                max_bytes=base.LOG_READ_BYTES,
                zone=_stamp_zone(source),
            )
        except FileNotFoundError:  # removed since it was listed: the endpoint was deleted
            return base.LogLines(replica=source.name, replicas=sources)
        except OSError as exc:
            raise TemporaryDriverError(f"the log of {source.name} cannot be read") from exc
        lines = [base.LogLine(base.clean_log_line(text), ts) for text, ts in found.lines]
        return base.LogLines(
            replica=source.name,
            lines=lines,
            replicas=sources,
            cursor=found.cursor,
            continued=found.continued,
            more=found.more,
        )


# What engines and routers inherit from the worker. Never its whole environment: that holds
# SECRET_KEY, PLINTH_ENCRYPTION_KEY and the database URL, and an engine runs model code.
_INHERITED_NAMES = frozenset({"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "HF_HOME"})
_INHERITED_PREFIXES = ("PLINTH_SIM_", "HF_HUB_", "CUDA_", "NVIDIA_", "NCCL_")


# The simulated engine starts phase by phase (download, load, CUDA graphs, warm-up) in its
# modelled time, as a real one would, so the endpoint page's start bars show real phases; a
# setting of the worker's environment (tests' fast engines) or the spec's runtime.env wins.
_SIM_DEFAULTS = {"PLINTH_SIM_COLD_START": "1"}


def _inherited_env() -> dict[str, str]:
    return {
        name: value
        for name, value in os.environ.items()
        if name in _INHERITED_NAMES or name.startswith(_INHERITED_PREFIXES)
    }


_PROCESS_NAME = re.compile(r"\Ar\d+-(?P<role>[a-z]+)-\d+\Z")


def _log_source(name: str) -> base.LogSource:
    """A log file's process: ``r<revision>-<role>-<index>`` or the router."""
    match = _PROCESS_NAME.match(name)
    return base.LogSource(name=name, role=match["role"] if match else name)


def _stamp_zone(source: base.LogSource) -> tzinfo | None:
    """The zone of a process' zoneless stamps: smg writes UTC (``2025-06-01 12:00:00``, whatever
    ``TZ`` says); SGLang and the simulator write local time (None)."""
    return UTC if source.role == ROUTER else None


def _identity(table: ProcessTable, name: str) -> dict[str, str]:
    """Marks every process with its endpoint, so an operator (or a test) can find them all."""
    return {"PLINTH_DEPLOYMENT_ID": table.root.name, "PLINTH_REPLICA": name}


def _ready(record: ProcessRecord) -> bool:
    if not record.alive():
        return False
    with EngineClient(record.url, timeout=1.0) as client:
        return client.ready()


def _router_state(router: ProcessRecord | None, api_key: str) -> tuple[str, bool, set[str] | None]:
    """(url, ready, URLs of the healthy workers it routes to); no URL when it is not up."""
    if router is None or not router.alive():
        return "", False, None
    with RouterClient(router.url, timeout=1.0, api_key=api_key) as client:
        if not client.live():
            return "", False, None
        try:
            workers = client.workers()
        except RuntimeUnavailable:
            workers = []
        routed = {str(w.get("url")) for w in workers if w.get("is_healthy", True)}
        return router.url, client.ready(), routed


def _engine_facts(record: ProcessRecord, routed: set[str] | None) -> base.ReplicaFacts:
    """An engine is ready when it answers /ready and the router sends it traffic."""
    facts = functools.partial(
        base.ReplicaFacts,
        name=record.name,
        revision=record.revision,
        role=record.role,
        restarts=record.restarts,
        url=record.url,
        # This machine neither schedules nor pulls: the process starting is all three.
        milestones=dict.fromkeys(
            (startup.CREATED, startup.SCHEDULED, startup.IMAGE_PULLED), record.started_at
        ),
    )
    if not record.alive():
        code = f" with code {record.exit_code}" if record.exit_code is not None else ""
        message = f"{record.name} exited{code}"
        return facts(phase=base.FAILED, ready=False, reason="Exited", message=message)
    if record.stopping_since is not None:
        return facts(phase=base.TERMINATING, ready=False)
    if record.released_at is not None:
        message = "GPU memory released; resumes on the next scale-up"
        return facts(phase=base.RELEASED, ready=False, reason="WarmPool", message=message)
    with EngineClient(record.url, timeout=1.0) as client:
        state = client.ready_state()
    if state == "ready" and routed is not None and record.url not in routed:
        return facts(phase=base.RUNNING, ready=False)  # not routed yet
    phase = {"ready": base.READY, "unready": base.LOADING}.get(state, base.STARTING)
    return facts(phase=phase, ready=state == "ready")


def _wait(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def _smg_binary() -> str:
    beside = Path(sys.executable).with_name("smg")
    found = str(beside) if beside.exists() else shutil.which("smg")
    if not found:
        raise TemporaryDriverError("the smg router binary is not installed")
    return found
