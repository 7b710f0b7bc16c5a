"""A quantization attempt's progress on Kubernetes is read from its pod's log a little at a
time: each read asks only for what came after the previous one (``sinceTime`` with time
stamps), skips what it had, numbers the new lines after the old, and a restarted worker resumes
at the cursor its predecessor saved.

Why the emulator (a stand-in, see kube_emulator.py): kwok's nodes serve no container logs, so
the tool's lines are written by the test, at time stamps it chooses (two lines in one
nanosecond among them); and the test asserts what each log request asked for.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.quantize import LogCursor, stamp_ns
from deployments.drivers.kube.render.quantize import CONTAINER
from tests.drivers.kube_emulator import CLIENT_TIMEOUT_S, RunningEmulator
from tests.drivers.reference_specs import REF

NS = REF.namespace
JOB = base.QuantizationJob(
    run_id="7c1e0d5a-0000-4000-8000-00000000c0de",
    attempt=1,
    namespace=NS,
    job={"output_dir": "/models/plinth-quantized/run"},
)
POD = f"{JOB.name}-x7k2p"
T0 = datetime(2026, 12, 5, 12, 0, 0, 250_000, tzinfo=UTC)


def _worker(emulator: RunningEmulator) -> KubeDriver:
    """A worker's driver: its own client, nothing kept in memory between workers."""
    return KubeDriver(KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S))


@pytest.fixture
def running_job(emulator: RunningEmulator) -> RunningEmulator:
    """The attempt's Job, running, and its pod, as the Job controller and kubelet leave them."""
    emulator.put("batch/v1", "Job", NS, {"metadata": {"name": JOB.name}, "status": {"active": 1}})
    labels = {L.QUANTIZATION: JOB.run_id, "job-name": JOB.name}
    running = [{"name": CONTAINER, "ready": True, "state": {"running": {}}}]
    pod = {
        "metadata": {"name": POD, "labels": labels},
        "spec": {"containers": [{"name": CONTAINER, "image": "x"}]},
        "status": {"phase": "Running", "containerStatuses": running},
    }
    emulator.put("v1", "Pod", NS, pod)
    return emulator


def _log_requests(emulator: RunningEmulator) -> list[dict[str, Any]]:
    return [dict(r.params) for r in emulator.emulator._requests if r.url.path.endswith("/log")]


def test_each_read_asks_only_for_what_is_new_and_a_restarted_worker_resumes(
    running_job: RunningEmulator,
) -> None:
    emulator = running_job
    emulator.write_log(NS, POD, CONTAINER, ['{"n": 0}', "", '{"n": 1}', '{"n": 2}'], at=T0)
    driver = _worker(emulator)
    first = driver.read_quantization(JOB)
    assert first.state == base.QUANTIZE_RUNNING
    assert first.lines == ('{"n": 0}', '{"n": 1}', '{"n": 2}') and first.first_line == 0
    assert "sinceTime" not in _log_requests(emulator)[-1]

    # The next lines, the first in the very nanosecond of the last line read.
    last = T0 + timedelta(microseconds=3)
    emulator.write_log(NS, POD, CONTAINER, ['{"n": 3}', '{"n": 4}'], at=last)
    second = driver.read_quantization(JOB, after=first.cursor)
    assert second.lines == ('{"n": 3}', '{"n": 4}') and second.first_line == 3
    asked = _log_requests(emulator)[-1]
    assert asked["sinceTime"] == "2026-12-05T12:00:00Z" and asked["timestamps"] == "true"
    assert driver.read_quantization(JOB, after=second.cursor).lines == ()
    driver.close()

    # Another worker, with only the cursor the database kept, goes on from there.
    emulator.write_log(NS, POD, CONTAINER, ['{"n": 5}'], at=T0 + timedelta(seconds=3))
    emulator.put(
        "batch/v1", "Job", NS, {"metadata": {"name": JOB.name}, "status": {"succeeded": 1}}
    )
    restarted = _worker(emulator)
    done = restarted.read_quantization(JOB, after=second.cursor)
    assert done.state == base.QUANTIZE_SUCCEEDED
    assert done.lines == ('{"n": 5}',) and done.first_line == 5
    assert _log_requests(emulator)[-1]["sinceTime"] == "2026-12-05T12:00:00Z"
    restarted.close()


def test_a_line_cut_short_is_read_whole_the_next_time() -> None:
    stamp = "2026-12-05T12:00:00.000000001Z"
    lines, cursor = LogCursor().past(f"{stamp} done\n{stamp} hal")
    assert lines == ["done"] and cursor.lines == 1
    again, after = cursor.past(f"{stamp} done\n{stamp} half\n")
    assert again == ["half"] and (after.at_stamp, after.lines) == (2, 2)
    assert LogCursor.parse(after.text()) == after


def test_time_stamps_are_exact_to_the_nanosecond_in_any_zone() -> None:
    utc = stamp_ns("2026-12-05T12:00:00.123456789Z")
    assert utc is not None and utc % 10**9 == 123_456_789
    assert stamp_ns("2026-12-05T13:00:00.123456789+01:00") == utc
    assert stamp_ns("2026-12-05T12:00:00.1234Z") == utc - 56_789
    assert stamp_ns("not a stamp") is None
