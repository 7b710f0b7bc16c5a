"""A replica's cold start, phase by phase: what the phases are, and how to read them from what a
cluster and an engine say.

A start is a run of milestones, each the end of one phase: the pod (or process) is created, then
scheduled onto a node, its image pulled (its first container runs), its weights downloaded into
the node's cache (or found there), loaded onto the GPUs, CUDA graphs captured, the engine warmed
up, and the replica ready (its readiness probe passes). A phase's duration is the time from the
previous known milestone to its own; a phase nothing reports is left out, and its time falls
into the next phase that is known, so the durations always add up to the whole start.

Where each milestone comes from (none is invented; SGLang 0.5.23 has no API for its start):

- scheduled, image pulled, ready: the cluster (Kubernetes' ``PodScheduled`` and ``Ready``
  conditions, the first container's ``startedAt``; the local driver's process start and
  readiness).
- weights downloaded: Kubernetes' weights init containers finishing (a download into a node's
  cache, or the wait for the download Job's marker); an engine that downloads itself logs
  huggingface_hub's ``Fetching N files: 100%|...| [mm:ss<...]`` bar, whose elapsed time is read.
- weights loaded, CUDA graphs captured: SGLang's own log lines, ``Load weight end.
  elapsed=12.34 s`` and ``Capture cuda graph end. Time elapsed: 5.67 s`` (the load figure
  includes a download the engine did itself, which is taken off).
- warm-up: SGLang logs no figure for it; it is the time between the graph capture's line and
  ``The server is fired up and ready to roll!`` by the lines' own stamps.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

CREATED = "created"  # the start's origin, not a phase
SCHEDULED = "scheduled"
IMAGE_PULLED = "image_pulled"
WEIGHTS_DOWNLOADED = "weights_downloaded"
WEIGHTS_LOADED = "weights_loaded"
CUDA_GRAPHS_CAPTURED = "cuda_graphs_captured"
WARMUP = "warmup"
READY = "ready"
PHASES = (
    SCHEDULED,
    IMAGE_PULLED,
    WEIGHTS_DOWNLOADED,
    WEIGHTS_LOADED,
    CUDA_GRAPHS_CAPTURED,
    WARMUP,
    READY,
)
# Not a start phase: what a warm pool's replica (released GPU memory, ``autoscaling.warm_replicas``)
# waits on to serve again, its weights copied back onto the GPUs. A resume records no start, but a
# request held through a scale from zero is told it waits on one, not on a scheduling.
RESUME = "resume"
# What a held request may wait on, furthest from serving first (``furthest``): a resume is
# nearer to serving than any cold start's phase.
WAITS = (*PHASES[:-1], RESUME, READY)
PHASE_LABELS = {
    SCHEDULED: "scheduled",
    IMAGE_PULLED: "image pulled",
    WEIGHTS_DOWNLOADED: "weights downloaded",
    WEIGHTS_LOADED: "weights loaded",
    CUDA_GRAPHS_CAPTURED: "CUDA graphs captured",
    WARMUP: "warm-up",
    READY: "ready",
}

# SGLang's (and huggingface_hub's) own words; see the module docstring.
LOAD_BEGIN = "Load weight begin."
LOAD_END = re.compile(r"Load weight end\. elapsed=(?P<s>\d+(?:\.\d+)?) s")
GRAPHS_BEGIN = "Capture cuda graph begin."
GRAPHS_END = re.compile(r"Capture cuda graph end\. Time elapsed: (?P<s>\d+(?:\.\d+)?) s")
FETCH_DONE = re.compile(r"Fetching \d+ files: 100%.*\[(?:(?P<h>\d+):)?(?P<m>\d+):(?P<sec>\d+)<")
FIRED_UP = "The server is fired up and ready to roll!"


@dataclass(frozen=True)
class EnginePhases:
    """What an engine's log says of its start: seconds per engine phase, and where it got to."""

    seconds: dict[str, float] = field(default_factory=dict)
    reached: str = ""  # the last engine milestone logged ("" before the weights load begins)
    downloaded: bool = False  # the engine fetched weights itself (not found in a cache)


def _fetch_seconds(line: str) -> float | None:
    match = FETCH_DONE.search(line)
    if match is None:
        return None
    return int(match["h"] or 0) * 3600.0 + int(match["m"]) * 60.0 + int(match["sec"])


def engine_phases(lines: Iterable[tuple[str, datetime | None]]) -> EnginePhases:
    """The engine phases its log lines (text, stamp) tell; the last run's when it restarted."""
    seconds: dict[str, float] = {}
    reached, downloaded = "", False
    graphs_end_at: datetime | None = None
    for text, stamp in lines:
        if LOAD_BEGIN in text:  # a (re)start: what an earlier run logged is not this one's
            seconds, reached, downloaded, graphs_end_at = {}, "loading", False, None
        elif (fetched := _fetch_seconds(text)) is not None:
            seconds[WEIGHTS_DOWNLOADED] = seconds.get(WEIGHTS_DOWNLOADED, 0.0) + fetched
            downloaded, reached = True, WEIGHTS_DOWNLOADED
        elif match := LOAD_END.search(text):
            load = float(match["s"]) - seconds.get(WEIGHTS_DOWNLOADED, 0.0)
            seconds[WEIGHTS_LOADED], reached = max(0.0, load), WEIGHTS_LOADED
        elif match := GRAPHS_END.search(text):
            seconds[CUDA_GRAPHS_CAPTURED], reached = float(match["s"]), CUDA_GRAPHS_CAPTURED
            graphs_end_at = stamp
        elif FIRED_UP in text:
            if graphs_end_at is not None and stamp is not None:
                seconds[WARMUP] = max(0.0, (stamp - graphs_end_at).total_seconds())
            reached = WARMUP
    return EnginePhases(seconds, reached, downloaded)


def waiting_on(milestones: Mapping[str, float], engine_reached: str = "") -> str:
    """The phase a starting replica is in now: the first one whose milestone is not reached.

    ``milestones`` are the cluster's (phase -> epoch seconds); ``engine_reached`` the last
    engine milestone its log shows (``engine_phases``), "loading" while weights load.
    """
    if READY in milestones:
        return ""
    for phase in (SCHEDULED, IMAGE_PULLED):
        if phase not in milestones:
            return phase
    engine_order = (WEIGHTS_DOWNLOADED, WEIGHTS_LOADED, CUDA_GRAPHS_CAPTURED, WARMUP)
    if engine_reached == "loading":  # SGLang downloads (if it must) inside its load
        return WEIGHTS_LOADED
    if engine_reached in engine_order:
        after = engine_order.index(engine_reached) + 1
        return engine_order[after] if after < len(engine_order) else READY
    if WEIGHTS_DOWNLOADED not in milestones:
        return WEIGHTS_DOWNLOADED
    return WEIGHTS_LOADED


def furthest(phases: Iterable[str]) -> str:
    """The phase nearest to ready among starting (or resuming) replicas' (what a scale from zero
    waits on)."""
    known = [p for p in phases if p in WAITS]
    return max(known, key=WAITS.index) if known else ""


def durations(
    milestones: Mapping[str, float], engine: EnginePhases | None = None
) -> dict[str, float]:
    """Seconds per phase of a finished start, in phase order.

    The cluster's milestones give the outer phases; the engine's figures split the time between
    the engine's container starting and the replica being ready. What the engine's figures do
    not cover (a probe period, an unlogged step) is the ``ready`` phase's.
    """
    if CREATED not in milestones or READY not in milestones:
        return {}
    result: dict[str, float] = {}
    last = milestones[CREATED]
    for phase in (SCHEDULED, IMAGE_PULLED, WEIGHTS_DOWNLOADED):
        if phase in milestones:
            at = max(milestones[phase], last)
            result[phase] = at - last
            last = at
    engine_seconds = dict(engine.seconds) if engine else {}
    engine_total = sum(engine_seconds.values())
    if WEIGHTS_DOWNLOADED in engine_seconds:  # the engine fetched them itself
        result[WEIGHTS_DOWNLOADED] = result.get(WEIGHTS_DOWNLOADED, 0.0)
        result[WEIGHTS_DOWNLOADED] += engine_seconds.pop(WEIGHTS_DOWNLOADED)
    remaining = max(0.0, milestones[READY] - last)
    for phase in (WEIGHTS_LOADED, CUDA_GRAPHS_CAPTURED, WARMUP):
        if phase in engine_seconds:
            result[phase] = engine_seconds[phase]
    # The engine's figures are its own clock (a simulator's is scaled): the ready phase is what
    # the cluster saw beyond them, never negative.
    result[READY] = max(0.0, remaining - engine_total)
    return {phase: round(result[phase], 3) for phase in PHASES if phase in result}
