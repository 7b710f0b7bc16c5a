"""Running a quantization attempt's Job on a cluster and reading its events from the pod's log.

``start`` applies ``render.quantize``'s objects as Plinth's (server-side apply, field manager
``plinth``; applying again changes nothing, so a restarted worker may call it again). ``read``
tells the attempt's state from the Job's status, and its events from its pod's log. ``remove``
deletes the Job (its pods with it) and the ConfigMap and Secret; the checkpoints in the model
cache stay.

The log is read from where the previous read stopped, not from its start each time (a long run
prints megabytes, read every few seconds): each line is asked with its kubelet time stamp, and
the read's ``cursor`` is the last line's stamp, how many lines with that very stamp were read
(two lines may share one) and how many lines were read in all. The next read asks for lines
since that stamp's whole second (the API's precision) and skips what the cursor says was read.
The caller keeps the cursor with its count of lines read, so a restarted worker resumes there.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient, kind_of
from deployments.drivers.kube.render import KubeOptions
from deployments.drivers.kube.render.quantize import (
    CONTAINER,
    JOB_MOUNT,
    job_config_map,
    quantize_job,
    token_secret,
)

LOG_LIMIT_BYTES = 4 * 1024 * 1024  # of one read of the log
MAX_PAGES = 8  # reads of the log one call makes at most
_JOBS = ("batch/v1", "Job")


def objects(job: base.QuantizationJob, options: KubeOptions) -> list[dict[str, object]]:
    """The attempt's objects, the Job last."""
    spec = dict(job.job)
    calibration = "".join(json.dumps({"text": t}) + "\n" for t in job.calibration)
    if calibration:
        spec["calibration"] = {**spec["calibration"], "path": f"{JOB_MOUNT}/calibration.jsonl"}
    made = [job_config_map(job, json.dumps(spec), calibration)]
    if job.source_repo and job.hf_token:
        made.append(token_secret(job))
    made.append(quantize_job(job, cluster=options.cluster, image=options.quantize_image))
    return made


def start(client: KubeClient, options: KubeOptions, job: base.QuantizationJob) -> None:
    for obj in objects(job, options):
        client.apply(obj, force=True)


def read(
    client: KubeClient, job: base.QuantizationJob, after: str = ""
) -> base.QuantizationProgress:
    found = client.get(kind_of(*_JOBS), job.namespace, job.name)
    output = str(job.job["output_dir"])
    if found is None:
        return base.QuantizationProgress(base.QUANTIZE_GONE, output_dir=output)
    lines, cursor = _log_lines(client, job, LogCursor.parse(after))
    state, message = _state(job, found.get("status") or {})
    first = cursor.lines - len(lines)
    return base.QuantizationProgress(
        state, lines, message, output, first_line=first, cursor=cursor.text()
    )


def _state(job: base.QuantizationJob, status: dict[str, object]) -> tuple[str, str]:
    if status.get("succeeded"):
        return base.QUANTIZE_SUCCEEDED, ""
    if status.get("failed"):
        reason = _condition(status)
        return (
            base.QUANTIZE_FAILED,
            f"the quantization Job {job.name} failed{reason} (see its pod's log)",
        )
    return base.QUANTIZE_RUNNING, ""


def _condition(status: dict[str, object]) -> str:
    for condition in status.get("conditions") or []:  # type: ignore[attr-defined]
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return f": {condition.get('reason', '')} {condition.get('message', '')}".rstrip()
    return ""


@dataclass(frozen=True)
class LogCursor:
    """Where a read of the attempt's log stopped: the last line's stamp (nanoseconds since the
    epoch), how many lines bore that very stamp, and how many lines (not blank) were read."""

    stamp: int = 0
    at_stamp: int = 0
    lines: int = 0

    @classmethod
    def parse(cls, text: str) -> LogCursor:
        """The cursor ``text()`` wrote; the start for "" (or anything else)."""
        parts = text.split()
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            return cls()
        return cls(*(int(p) for p in parts))

    def text(self) -> str:
        return f"{self.stamp} {self.at_stamp} {self.lines}" if self.stamp else ""

    def since(self) -> datetime | None:
        """The whole second to ask the log from (None: from its start)."""
        return datetime.fromtimestamp(self.stamp // 10**9, UTC) if self.stamp else None

    def past(self, stamped: str) -> tuple[list[str], LogCursor]:
        """The lines of ``stamped`` (a log read with time stamps, from ``since``) that this
        cursor has not read, blank ones left out, and the cursor after them. A line cut short
        (the log's end mid-write, or the read's byte limit) is left for the next read."""
        new: list[str] = []
        stamp, at_stamp, skip = self.stamp, self.at_stamp, self.at_stamp
        for line in stamped.split("\n")[:-1]:
            when, _, text = line.partition(" ")
            ns = stamp_ns(when)
            if ns is None or ns < self.stamp:
                continue  # before the cursor (the API's whole second), or no stamp to go by
            if ns == self.stamp and skip:
                skip -= 1  # read already, in the same nanosecond as the cursor's line
                continue
            stamp, at_stamp = (ns, at_stamp + 1) if ns == stamp else (ns, 1)
            if text.strip():
                new.append(text)
        return new, LogCursor(stamp, at_stamp, self.lines + len(new))


_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)")


def stamp_ns(when: str) -> int | None:
    """An RFC 3339 time stamp, as the kubelet writes it (nine fraction digits), in nanoseconds
    since the epoch; None for anything else. Exact: a float would merge nearby lines."""
    match = _STAMP.fullmatch(when)
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    seconds = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone)).timestamp()
    return int(seconds) * 10**9 + int((fraction or "").ljust(9, "0"))


def _log_lines(
    client: KubeClient, job: base.QuantizationJob, cursor: LogCursor
) -> tuple[tuple[str, ...], LogCursor]:
    """The log's lines after ``cursor`` and the cursor after them."""
    pods = client.list(kind_of("v1", "Pod"), job.namespace, {L.QUANTIZATION: job.run_id})
    mine = [p for p in pods if p["metadata"].get("labels", {}).get("job-name") == job.name]
    if not mine:
        return (), cursor
    running = (mine[-1].get("status") or {}).get("containerStatuses") or []
    if not running:  # still pulling or downloading the source: no log yet
        return (), cursor
    pod = mine[-1]["metadata"]["name"]
    lines: list[str] = []
    for _ in range(MAX_PAGES):  # a full page may have more behind it (the Job's last read)
        log = client.pod_log(
            job.namespace,
            pod,
            container=CONTAINER,
            since=cursor.since(),
            timestamps=True,
            limit_bytes=LOG_LIMIT_BYTES,
        )
        new, after = cursor.past(log)
        lines += new
        if len(log.encode()) < LOG_LIMIT_BYTES or after == cursor:
            return tuple(lines), after
        cursor = after
    return tuple(lines), cursor


def remove(client: KubeClient, job: base.QuantizationJob) -> bool:
    gone = client.delete(kind_of(*_JOBS), job.namespace, job.name)
    client.delete(kind_of("v1", "ConfigMap"), job.namespace, job.name)
    client.delete(kind_of("v1", "Secret"), job.namespace, f"{job.name}-hf")
    return bool(gone)
