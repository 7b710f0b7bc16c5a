"""The driver interface: place a revision's LaunchPlan on a cluster, observe it, delete it, logs,
run a benchmark against it, and run the quantization tool (``QuantizationJob``).

A driver is given everything it needs as plain values (no Django models), so drivers are testable
without a database: a ``DeploymentRef`` names the endpoint, a ``RevisionPlan`` says what one
revision runs. ``apply`` is idempotent and moves a rollout one step: engines of the applied
revision are started next to the old ones (surge) and old ones are stopped only as new ones become
ready, so applying the previous revision again is the rollback.

``Observation`` holds facts, not a status: per replica its phase, readiness, restarts and last
reason; per deployment the router's address, the events worth showing and the revisions that
will not become ready whatever time passes (``RevisionFailure``). Phases are the ones
``deployments.status`` understands: pending, starting, loading, running, ready, failed,
terminating.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from runtime.launch import LaunchPlan, RolePlan
from runtime.lora_live import LoraLiveChange
from runtime.spec import RuntimeSpec

PENDING = "pending"
STARTING = "starting"
LOADING = "loading"
RUNNING = "running"
READY = "ready"
FAILED = "failed"
TERMINATING = "terminating"
# A warm pool's replica (``autoscaling.warm_replicas``): its process loaded, its GPU memory
# released; it serves nothing until resumed, and is no part of the endpoint's replica count.
RELEASED = "released"
# A warm pool's replica asked back into service, its GPU memory coming back (the Kubernetes
# driver's pods resume on their own, after the pass that asked; the local driver's within it).
# On its way to serving, like a loading one: one of the endpoint's replicas again.
RESUMING = "resuming"
PHASES = (PENDING, STARTING, LOADING, RUNNING, READY, FAILED, TERMINATING, RELEASED, RESUMING)

# The variable engines read the model hub token from (huggingface_hub's own name for it).
HF_TOKEN_ENV = "HF_TOKEN"
# SGLang logs its whole ServerArgs at start (``api_key='...'``) and the local driver logs each
# command line (``--api-key ...``): log lines are shown with these values masked.
_SECRET_IN_LOG = re.compile(
    r"((?:api_key|admin_api_key)['\"]?\s*[=:]\s*['\"]?|--(?:admin-)?api-key[ =])[^'\"\s,)}]+"
)


_KEY_FLAGS = frozenset({"--api-key", "--admin-api-key"})
# What a terminal acts on rather than shows (ECMA-48). smg colours and dims every part of its
# lines even into a file or a pipe (``ESC[2m2026-01-01 12:00:00ESC[0m ESC[32m INFO``), progress
# bars move the cursor and erase; a browser would show all of it as junk.
_TERMINAL_CONTROL = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: every SGR (colour, dim, italic, reset), cursor, erase
    r"|\x1b[\]PX^_].*?(?:\x07|\x1b\\|\Z)"  # OSC (titles, links), DCS, SOS, PM, APC: to their end
    r"|\x1b[ -/]*[0-~]?"  # any other escape (ESC 7, ESC ( B), or a lone ESC
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"  # other control characters; tab, CR kept
)


def clean_log_line(line: str) -> str:
    """``line`` as shown: as a terminal would render it, any API key in it masked with ``***``.

    Escape sequences and control characters are removed, and a carriage return starts the line
    over (a progress bar redrawn in place: its last state is what is left). Removing them first
    also keeps a coloured ``api_key=`` from hiding its value from the mask.
    """
    return _SECRET_IN_LOG.sub(r"\1***", plain_text(line))


def plain_text(line: str) -> str:
    """``line`` without terminal control: escape sequences gone, and only what follows the last
    carriage return (the redraw erases the rest: tqdm pads it, others send an erase code)."""
    drawn = [segment for segment in _TERMINAL_CONTROL.sub("", line).split("\r") if segment]
    return drawn[-1] if drawn else ""


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with the value of every API key flag replaced by ``***``."""
    return [
        "***" if index and argv[index - 1] in _KEY_FLAGS else token
        for index, token in enumerate(argv)
    ]


@dataclass(frozen=True)
class DeploymentRef:
    """Which endpoint: its id (labels, directories) and slug (object names, log lines).

    ``api_key`` is the bearer token its engines and router demand (``--api-key``); empty runs
    them open. Kept out of ``repr`` so a logged ref never shows it.
    """

    id: str
    slug: str
    namespace: str = "plinth"
    api_key: str = field(default="", repr=False)


@dataclass(frozen=True)
class RevisionPlan:
    """What one revision runs. ``replicas`` is the desired number of engine replicas."""

    number: int
    plan: LaunchPlan
    replicas: int
    spec_hash: str = ""
    # The model hub token itself, when the model is gated: reconcile reveals it from the Secret
    # named by ``model.hf_token_secret``. Engines get it in their environment (HF_TOKEN), never
    # in argv, a manifest's plain fields or a log.
    hf_token: str | None = None
    # What the cluster's settings are chosen by: the catalogue GPU the spec asks for (node
    # affinity) and its SGLang version (the cluster's engine image for it). "" when unknown.
    gpu: str = ""
    sglang_version: str = ""
    # The images the spec itself names (``runtime.image``, ``runtime.router_image``), which win
    # over the cluster's only where its operator lets tenants override them.
    engine_image: str | None = None
    router_image: str | None = None
    # A split endpoint's pool sizes where the autoscaler changed them (``Deployment.pool_sizes``);
    # a pool not named runs the size its spec gives.
    pools: dict[str, int] = field(default_factory=dict)
    # Keep the weights on every node of ``gpu`` (``autoscaling.prestage_weights``).
    prestage_weights: bool = False
    # Replicas beyond ``replicas`` kept loaded with their GPU memory released rather than
    # stopped (``autoscaling.warm_replicas``), resumed first when the count grows again. The
    # local driver does it; the kube driver stops them as before (see README's cold starts).
    warm_replicas: int = 0

    @classmethod
    def for_spec(
        cls,
        spec: RuntimeSpec,
        plan: LaunchPlan,
        *,
        number: int,
        replicas: int,
        spec_hash: str = "",
        hf_token: str | None = None,
        pools: dict[str, int] | None = None,
    ) -> RevisionPlan:
        """The plan of ``spec``'s revision ``number``, with what placement needs of the spec."""
        return cls(
            number=number,
            plan=plan,
            replicas=replicas,
            spec_hash=spec_hash,
            hf_token=hf_token,
            gpu=spec.hardware.gpu,
            sglang_version=spec.runtime.sglang_version,
            engine_image=spec.runtime.image,
            router_image=spec.runtime.router_image,
            pools=dict(pools or {}),
            prestage_weights=spec.autoscaling.prestage_weights,
            warm_replicas=spec.autoscaling.warm_replicas,
        )

    def replicas_of(self, role: RolePlan) -> int:
        """How many replicas ``role`` runs: the endpoint's desired count for a plain engine (the
        user and the autoscaler set it), the pool's own size for prefill and decode (the spec's,
        or the autoscaler's where it scaled the pool), and the plan's for the router."""
        if role.role == "engine":
            return self.replicas
        return self.pools.get(role.role, role.replicas)


@dataclass(frozen=True)
class ReplicaFacts:
    """One engine replica (a process, a pod or a multi-node group) as last seen."""

    name: str
    revision: int | None
    role: str
    phase: str
    ready: bool
    restarts: int = 0
    reason: str = ""
    message: str = ""
    url: str = ""
    # This run's start as the cluster saw it: ``runtime.startup`` milestone -> epoch seconds
    # (created, scheduled, image pulled, weights downloaded, ready), those that are known.
    milestones: dict[str, float] = field(default_factory=dict)
    # The phase a starting replica waits on (``runtime.startup.waiting_on``); "" otherwise.
    start_phase: str = ""
    cluster: str = ""  # which cluster it runs on, for an endpoint placed on several

    def as_dict(self) -> dict[str, object]:
        named = {"cluster": self.cluster} if self.cluster else {}
        return {
            **named,
            "name": self.name,
            "revision": self.revision,
            "role": self.role,
            "phase": self.phase,
            "ready": self.ready,
            "restarts": self.restarts,
            "reason": self.reason,
            "message": self.message,
            "url": self.url,
            "milestones": dict(self.milestones),
            "start_phase": self.start_phase,
        }


@dataclass(frozen=True)
class ObservedEvent:
    """Something worth a line in the endpoint's timeline. ``key`` dedupes repeats."""

    reason: str
    message: str
    level: str = "info"  # info | warning | error
    key: str = ""


@dataclass(frozen=True)
class RevisionFailure:
    """A revision that will not become ready however long it is given, until something changes
    (a new revision, a stop and start): its weights download gave up, say. ``reason`` and
    ``message`` are the cluster's own words (a Job's condition, its pod's last lines)."""

    revision: int
    reason: str
    message: str


@dataclass(frozen=True)
class Observation:
    replicas: tuple[ReplicaFacts, ...] = ()
    router_url: str = ""
    router_ready: bool = False
    events: tuple[ObservedEvent, ...] = ()
    failures: tuple[RevisionFailure, ...] = ()

    def failure(self, revision: int) -> RevisionFailure | None:
        """Why ``revision`` will not become ready; None when nothing says it will not."""
        return next((f for f in self.failures if f.revision == revision), None)

    def engines(self, revision: int | None = None) -> list[ReplicaFacts]:
        """The engine replicas that serve or are on their way to (a released one is neither)."""
        return [
            r
            for r in self.replicas
            if r.role != "router"
            and r.phase != RELEASED
            and (revision is None or r.revision == revision)
        ]

    def ready_count(self, revision: int | None = None) -> int:
        return sum(1 for r in self.engines(revision) if r.ready)

    @property
    def empty(self) -> bool:
        return not self.replicas and not self.router_url


# A log read returns at most this many lines, and reads at most LOG_READ_BYTES of log text.
MAX_LOG_LINES = 5000
LOG_READ_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LogQuery:
    """Which lines of one replica's log to read.

    ``replica``: a name the driver lists (matched, never used as a path); None: the first of
    ``role`` (or of all). ``after``: a cursor from an earlier read; the lines written after it
    are returned, the oldest first, at most ``tail`` of them (``more`` says whether others
    follow), so a follower never skips a line. Without it: the last ``tail`` lines. ``since``
    keeps lines stamped at or after it. ``previous``: the container's previous run (Kubernetes).
    """

    replica: str | None = None
    role: str | None = None
    tail: int = 200
    since: datetime | None = None
    previous: bool = False
    after: str | None = None
    # A ``replica`` that is not listed (any more) picks as if none were named (the console,
    # whose replica menu may be older than the pods).
    fallback: bool = False


@dataclass(frozen=True)
class LogLine:
    """One line of text, with the time it was written when the log says (None: unknown)."""

    text: str
    ts: datetime | None = None


@dataclass(frozen=True)
class LogSource:
    """A replica that has a log: its name, role, restarts, and whether a previous run's log
    can be read separately (a restarted Kubernetes container)."""

    name: str
    role: str
    restarts: int = 0
    has_previous: bool = False


@dataclass(frozen=True)
class LogLines:
    """Lines of one replica's log, and every replica that has a log to ask for.

    ``replica`` is empty when none matched the query (no read was made). ``cursor`` continues
    after the last line returned (pass it back as ``LogQuery.after``); ``continued`` says the
    lines follow that cursor (False: it could not be used, e.g. the file was replaced, and the
    lines are a fresh tail); ``more``: lines after these are already written.
    """

    replica: str
    lines: list[LogLine] = field(default_factory=list)
    replicas: tuple[LogSource, ...] = ()
    cursor: str = ""
    continued: bool = False
    more: bool = False

    @property
    def source(self) -> LogSource | None:
        return next((s for s in self.replicas if s.name == self.replica), None)


def pick_source(sources: Sequence[LogSource], query: LogQuery) -> LogSource | None:
    """The source ``query`` asks for: by name (of ``query.role`` when both are given), else
    the first of the role, else the first; None when the name is not one of them (unless
    ``query.fallback``) or nothing has a log."""
    of_role = [s for s in sources if query.role is None or s.role == query.role]
    if query.replica is not None:
        named = next((s for s in of_role if s.name == query.replica), None)
        if named is not None or not query.fallback:
            return named
    return of_role[0] if of_role else None


@dataclass(frozen=True)
class BenchmarkPoint:
    """One load point of a benchmark: a name for its artifact folder (``concurrency-8``) and
    AIPerf's command line (without the executable), its slots unfilled (``deployments.aiperf``)."""

    name: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class BenchmarkRun:
    """A benchmark sweep against an endpoint's gateway URL, as a driver runs it.

    ``api_key`` is the run's temporary inference key (kept out of ``repr``). ``point_timeout_s``
    bounds one point run as a process; ``deadline_s`` the whole sweep run as one Job.
    ``artifact_dir`` is this machine's folder for the points' artifacts (the local runner's).
    """

    slug: str
    deployment_id: str
    benchmark_id: str
    namespace: str
    points: tuple[BenchmarkPoint, ...]
    artifact_dir: str
    point_timeout_s: float
    deadline_s: float
    api_key: str = field(default="", repr=False)


QUANTIZE_RUNNING = "running"
QUANTIZE_SUCCEEDED = "succeeded"
QUANTIZE_FAILED = "failed"
# Neither running nor finished: never started, or its process or pod died without a word.
QUANTIZE_GONE = "gone"


@dataclass(frozen=True)
class QuantizationJob:
    """One attempt of a quantization run, as a driver starts it.

    ``job`` is the tool's JOB.json (``tools/quantize``'s contract) with every path as the
    cluster sees its model cache (under ``runtime.spec.MODEL_CACHE_PATH``): the kube driver
    mounts the cache there, the local driver maps that prefix to its own model cache folder.
    ``calibration`` holds the uploaded texts (the driver writes them where the job's
    ``calibration.path`` says); empty: the tool's built-in set. ``source_repo``: a hub
    repository to download into ``job["source_path"]`` first (with ``hf_token``, kept out of
    ``repr``), "" when the source is already in the cache.
    """

    run_id: str
    attempt: int
    namespace: str
    job: dict[str, Any]
    gpu: str = ""
    gpus: int = 1
    calibration: tuple[str, ...] = ()
    source_repo: str = ""
    source_revision: str = ""
    hf_token: str | None = field(default=None, repr=False)
    deadline_s: int = 6 * 3600

    @property
    def name(self) -> str:
        """The attempt's short name (object names, folders)."""
        return f"quantize-{self.run_id[:8]}-{self.attempt}"


@dataclass(frozen=True)
class QuantizationProgress:
    """What a quantization attempt has said: lines of its standard output (the tool's
    JSON-lines events, the oldest first), ``lines[0]`` being its line ``first_line`` (0: every
    line; more: a read that resumed at ``cursor``), its state, and on failure the last lines of
    its log. ``output_dir``: where the attempt's ``output_dir`` is as the tool saw it, so its
    ``checkpoint`` paths can be told back under the model cache. ``cursor``: where this read
    stopped, for the next to resume at (``Driver.read_quantization``); the driver's own words,
    "" for a driver that reads every line each time."""

    state: str
    lines: tuple[str, ...] = ()
    message: str = ""
    output_dir: str = ""
    first_line: int = 0
    cursor: str = ""


class Driver(Protocol):
    """What reconcile needs from a cluster. Every method is safe to call again."""

    def apply(self, ref: DeploymentRef, revision: RevisionPlan) -> None:
        """Run ``revision`` at its replicas; step a surge rollout away from other revisions."""

    def observe(self, ref: DeploymentRef) -> Observation:
        """The facts of everything this endpoint has on the cluster."""

    def apply_adapters(
        self, ref: DeploymentRef, serving: int, number: int, change: LoraLiveChange
    ) -> bool:
        """Unload and load ``change``'s LoRA adapters on every engine of revision ``serving``,
        without a restart, and make those engines revision ``number``'s (its later replicas get
        the adapters from its launch flags). False where this driver cannot (the change is then
        rolled out); ``AdapterChangeRefused`` when an engine refused, every engine left with
        the adapters it had."""

    def stop(self, ref: DeploymentRef) -> bool:
        """Stop every engine and the router (desired state stopped); True once all are gone."""

    def delete(self, ref: DeploymentRef) -> bool:
        """Remove everything the endpoint owns; True once nothing is left (absent counts)."""

    def logs(self, ref: DeploymentRef, query: LogQuery) -> LogLines:
        """Lines of the replica ``query`` picks (``pick_source``), every line shown through
        ``clean_log_line``; no read when it picks none."""

    def run_benchmark(
        self, run: BenchmarkRun, on_point: Callable[[int, dict[str, Any]], None]
    ) -> None:
        """Run ``run``'s points in order, handing each point's AIPerf export to ``on_point``
        with its index as soon as the driver has it; a run that fails raises a DriverError."""

    def start_quantization(self, job: QuantizationJob) -> None:
        """Start ``job``'s attempt unless it already runs or ran (safe to call again)."""

    def read_quantization(self, job: QuantizationJob, after: str = "") -> QuantizationProgress:
        """What ``job``'s attempt has printed so far, and whether it still runs: from its first
        line, or only what came after ``after`` (a ``cursor`` an earlier read of this attempt
        returned, kept by the caller)."""

    def remove_quantization(self, job: QuantizationJob) -> bool:
        """Stop ``job``'s attempt and remove what it ran in (never its checkpoints); True once
        nothing is left."""

    def close(self) -> None:
        """Release connections (the kube client's pool); running endpoints are unaffected."""
