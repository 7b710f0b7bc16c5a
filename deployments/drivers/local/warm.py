"""A local endpoint's warm pool (``autoscaling.warm_replicas``): engine processes kept loaded
with their GPU memory released instead of stopped, and resumed when the count grows again.

Both go through the engine's own routes (SGLang's ``/release_memory_occupation`` and
``/resume_memory_occupation``, served with ``--enable-memory-saver``); the process record keeps
when each happened, for the replica's phase and the timeline's lines.
"""

from __future__ import annotations

import time

from deployments.drivers import base
from deployments.drivers.errors import TemporaryDriverError
from deployments.drivers.local.processes import ProcessRecord, ProcessTable
from runtime.client import EngineClient, RuntimeUnavailable

# Resuming copies every GPU's weights back over the host link: seconds on a real engine, far
# less than a start, but more than a probe's timeout.
RESUME_TIMEOUT_S = 120.0


def release(table: ProcessTable, record: ProcessRecord, api_key: str) -> ProcessRecord:
    """Release ``record``'s GPU memory, once; an engine still busy refuses, and the next pass
    asks again (it stays as it was meanwhile)."""
    if record.released_at is not None:
        return record
    try:
        with EngineClient(record.url, timeout=5.0, api_key=api_key) as client:
            released = client.ready() and client.release_memory()
    except RuntimeUnavailable:
        return record
    if released:
        record.released_at = time.time()
        table.save(record)
    return record


def resume(table: ProcessTable, record: ProcessRecord, api_key: str) -> ProcessRecord:
    """Bring a released ``record`` back to serving: its weights copied back, no new start."""
    if record.released_at is None:
        return record
    try:
        with EngineClient(record.url, timeout=RESUME_TIMEOUT_S, api_key=api_key) as client:
            resumed = client.resume_memory()
    except RuntimeUnavailable as exc:
        raise TemporaryDriverError(f"{record.name} did not resume: {exc}") from exc
    if not resumed:
        raise TemporaryDriverError(f"{record.name} refused to resume")
    record.released_at, record.resumed_at = None, time.time()
    table.save(record)
    return record


def events(record: ProcessRecord) -> list[base.ObservedEvent]:
    """The timeline's lines of ``record``'s last release and resume, each once (by key)."""
    found = []
    key = f"local:{record.name}:{record.pid}"
    if record.released_at is not None:
        message = f"{record.name} released its GPU memory; kept loaded in the warm pool"
        found.append(
            base.ObservedEvent("Released", message, "info", f"{key}:released:{record.released_at}")
        )
    if record.resumed_at is not None:
        message = f"{record.name} resumed from the warm pool (no cold start)"
        found.append(
            base.ObservedEvent("Resumed", message, "info", f"{key}:resumed:{record.resumed_at}")
        )
    return found
