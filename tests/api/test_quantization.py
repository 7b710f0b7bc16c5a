"""Quantization in the platform (issue 31 part B), through /api/v1/quantization: a run is
started (bad input is a 4xx naming the field), the tool's JSON-lines events become its phase,
per-layer sensitivity, candidates and artifacts (read twice, recorded once), candidates are
compared on the frontier, one is deployed as a canary with the KL gate or as a revision whose
model source is the artifact, calibration samples are uploaded and purged after their
retention, and a run's GPUs count in the quotas and its GPU-hours in the cost report.

The events are the tool's contract (tools/quantize, ``plinth_quantize run``) written out as
the lines it prints; the run with the real tool is tests/quantization/test_local_run.py.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from deployments.drivers.base import QUANTIZE_RUNNING, QuantizationProgress
from deployments.endpoints.models import Deployment
from deployments.quantization import services
from deployments.quantization.models import QuantizationRun, RunEvent
from deployments.quotas.models import Quota
from runtime.catalog.gpus import get_gpu
from runtime.spec import MODEL_CACHE_PATH
from tests.api.conftest import SPEC, Clients, error_of, fields_of
from tests.conftest import Cast
from tests.experiments.canary.helpers import mark_serving

SOURCE = f"{MODEL_CACHE_PATH}/tiny-llama"
RECIPES = [{"name": "all"}, {"name": "keep-2", "keep_bf16": ["model.layers.2.*"]}]
SEEN = "/tmp/work/out"  # the output folder as the tool saw it (a plain value)


def _candidate(name: str, kl: float, share: float, bits: float) -> dict[str, Any]:
    return {
        "event": "candidate", "name": name, "recipe": {"name": name, "keep_bf16": []},
        "mean_kl": kl, "top1": 1 - kl, "quantized_fraction": share, "bits_per_weight": bits,
        "checkpoint": f"{SEEN}/{name}", "quantization": "compressed-tensors",
        "tool": {"name": "llmcompressor", "version": "0.14.0.1"}, "calibration_sha256": "ab" * 32,
    }  # fmt: skip


EVENTS = [
    {"event": "phase", "phase": "sensitivity", "candidate": None},
    {"event": "sensitivity", "layers": [{"name": "model.layers.2", "kl": 0.02, "params": 64}]},
    {"event": "phase", "phase": "quantizing", "candidate": "all"},
    _candidate("all", 0.010, 1.0, 8.0),
    _candidate("keep-2", 0.004, 0.8, 9.6),
    _candidate("worse", 0.012, 0.8, 9.6),  # neither closer nor smaller: off the frontier
]
LINES = tuple(json.dumps(e) for e in EVENTS)


def _start(api: Clients, **body: Any) -> Any:
    return api.dave.post(
        "quantization/runs", {"format": "fp8", "source_model": SOURCE, "recipes": RECIPES, **body}
    )


def _observed(run_id: str, lines: tuple[str, ...] = LINES) -> QuantizationRun:
    """The driving task's writers applying ``lines`` as the tool printed them."""
    run = services.claim(run_id)
    assert run is not None
    services.begin_attempt(run)
    services.record_progress(run, QuantizationProgress(QUANTIZE_RUNNING, lines, "", SEEN))
    services.release(run)
    return run


def test_a_read_resumed_at_the_saved_cursor_is_numbered_after_the_lines_read(
    api: Clients,
) -> None:
    """The driver's cursor is kept with the count of lines read, in the run's row: a worker that
    takes the run over resumes the read there, and its lines are numbered on from the count."""
    run_id = _start(api).json()["id"]
    _observed(run_id, LINES[:2])
    taken_over = QuantizationRun.objects.get(pk=run_id)
    assert (taken_over.lines_read, taken_over.log_cursor) == (2, "")
    resumed = QuantizationProgress(
        QUANTIZE_RUNNING, LINES[2:4], "", SEEN, first_line=2, cursor="1765000000000000001 1 4"
    )
    services.record_progress(taken_over, resumed)
    services.record_progress(taken_over, resumed)  # read again: nothing twice
    run = QuantizationRun.objects.get(pk=run_id)
    assert (run.lines_read, run.log_cursor) == (4, "1765000000000000001 1 4")
    lines = RunEvent.objects.filter(run_id=run_id).values_list("line", "kind")
    assert list(lines) == [(0, "phase"), (1, "sensitivity"), (2, "phase"), (3, "candidate")]
    services.begin_attempt(run)  # the next attempt's output is read from its start
    assert (run.lines_read, run.log_cursor) == (0, "")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"format": "int3"}, "format"),
        ({"propose": True}, "recipes"),
        ({"recipes": [{"name": "a", "formats": {"x": "int3"}}]}, "recipes"),
        ({"source_model": "/etc/passwd"}, "source_model"),
        ({"gpu": "TPU-9"}, "gpu"),
        ({"samples": 0}, "samples"),
        ({"calibration_set": "nope"}, "calibration_set"),
    ],
)
def test_bad_input_is_refused_naming_the_field(
    api: Clients, body: dict[str, Any], field: str
) -> None:
    answer = _start(api, **body)
    assert 400 <= answer.status_code < 500, answer.content
    assert field in fields_of(answer)
    assert not QuantizationRun.objects.exists()


def test_the_tools_events_become_progress_candidates_and_artifacts_once(api: Clients) -> None:
    started = _start(api, name="tiny")
    assert started.status_code == 201, started.content
    run_id = started.json()["id"]
    run = _observed(run_id)
    services.record_progress(run, QuantizationProgress(QUANTIZE_RUNNING, LINES, "", SEEN))

    shown = api.carol.get(f"quantization/runs/{run_id}").json()
    assert (shown["status"], shown["phase"], shown["phase_candidate"]) == (
        "running", "quantizing", "all",
    )  # fmt: skip
    assert shown["sensitivity"] == [{"name": "model.layers.2", "kl": 0.02, "params": 64}]
    assert shown["events"] == len(LINES) == RunEvent.objects.filter(run_id=run_id).count()
    names = [c["name"] for c in shown["candidates"]]
    assert names == ["keep-2", "all", "worse"]  # the closest to the original first
    frontier = {c["name"] for c in shown["candidates"] if c["on_frontier"]}
    assert frontier == {"keep-2", "all"}
    out = f"{MODEL_CACHE_PATH}/plinth-quantized/{run_id}"
    assert shown["candidates"][0]["artifact"] == f"{out}/keep-2"

    compared = api.carol.get(f"quantization/runs/{run_id}/compare").json()
    assert compared["baseline"] == "all"
    kept = next(c for c in compared["candidates"] if c["name"] == "keep-2")
    assert kept["kl_vs_baseline"] == pytest.approx(-0.006)

    artifacts = api.carol.get("quantization/artifacts").json()["items"]
    assert {a["path"] for a in artifacts} == {f"{out}/all", f"{out}/keep-2", f"{out}/worse"}
    provenance = next(a for a in artifacts if a["candidate"] == "keep-2")
    assert provenance["source_model"] == SOURCE
    assert provenance["tool"] == {"name": "llmcompressor", "version": "0.14.0.1"}
    assert (provenance["calibration_sha256"], provenance["mean_kl"]) == ("ab" * 32, 0.004)
    assert api.bob.get(f"quantization/runs/{run_id}").status_code == 404
    assert api.bob.get("quantization/artifacts").json()["items"] == []


def test_a_candidate_is_deployed_as_a_gated_canary_or_a_revision(api: Clients, cast: Cast) -> None:
    from deployments.endpoints import services as endpoints

    actor = cast.actor(cast.dave, cast.acme)
    mark_serving(endpoints.create_deployment(actor, slug="chat", name="Chat", spec=SPEC))
    run_id = _start(api, source_model="", deployment="chat").json()["id"]
    _observed(run_id)
    path = f"{MODEL_CACHE_PATH}/plinth-quantized/{run_id}/keep-2"
    # Taken from the endpoint, the candidates are priced on its GPU (the frontier's x axis).
    shown = api.carol.get(f"quantization/runs/{run_id}").json()
    assert shown["source_model"] == SPEC["model"]["source"]
    speeds = {c["name"]: c["price"]["throughput_per_gpu"] for c in shown["candidates"]}
    assert speeds["all"] >= speeds["keep-2"] > 0  # quantizing more streams fewer bytes

    refused = api.dave.post(
        f"quantization/runs/{run_id}/deploy", {"deployment": "chat", "candidate": "nope"}
    )
    assert fields_of(refused) == ["candidate"]
    canary = api.dave.post(
        f"quantization/runs/{run_id}/deploy", {"deployment": "chat", "candidate": "keep-2"}
    )
    assert canary.status_code == 201, canary.content
    assert canary.json()["mode"] == "canary" and canary.json()["gate"]
    number = canary.json()["revision"]
    revision = api.carol.get(f"deployments/chat/revisions/{number}").json()
    assert revision["spec"]["model"]["source"] == path
    assert revision["spec"]["model"]["served_name"] == SPEC["model"]["source"]
    assert revision["spec"]["quantization"]["method"] == "compressed-tensors"
    gate = api.carol.get(f"deployments/chat/revisions/{number}/gate").json()
    assert gate["status"] == "pending"  # promotion waits for the KL gate to pass
    api.dave.post("deployments/chat/canary/abort", {})

    again = api.dave.post(
        f"quantization/runs/{run_id}/deploy",
        {"deployment": "chat", "candidate": "all", "mode": "revision"},
    )
    assert again.status_code == 201, again.content
    served = Deployment.objects.get(slug="chat").target_revision
    assert served is not None and served.spec["model"]["source"].endswith("/all")
    # A quantized checkpoint is not quantized again: the run is asked of its source.
    twice = _start(api, source_model=served.spec["model"]["source"])
    assert fields_of(twice) == ["source_model"] and SPEC["model"]["source"] in str(twice.json())


def test_calibration_samples_are_uploaded_and_deleted_after_their_retention(
    api: Clients,
) -> None:
    bad = api.dave.post("quantization/calibration-sets", {"name": "x", "samples": "{not json"})
    assert fields_of(bad) == ["samples"]
    jsonl = "".join(json.dumps({"text": f"sample {i}"}) + "\n" for i in range(3))
    made = api.dave.post(
        "quantization/calibration-sets", {"name": "support", "samples": jsonl, "retention_days": 1}
    )
    assert made.status_code == 201, made.content
    assert made.json()["samples"] == 3
    run = _start(api, calibration_set=made.json()["id"])
    assert run.status_code == 201 and run.json()["calibration_set"] == made.json()["id"]

    assert services.purge_expired_calibration(datetime.now(UTC) + timedelta(days=2)) == 1
    listed = api.carol.get("quantization/calibration-sets").json()["items"]
    assert listed[0]["purged_at"] is not None and listed[0]["sha256"] == made.json()["sha256"]
    refused = _start(api, calibration_set=made.json()["id"])
    assert fields_of(refused) == ["calibration_set"]


def test_a_runs_gpus_count_in_the_quota_and_its_gpu_hours_in_the_cost(
    api: Clients, cast: Cast
) -> None:
    Quota.objects.create(organization=cast.acme, gpus=1)
    first = _start(api)
    assert first.status_code == 201
    over = _start(api)
    assert over.status_code == 409 and error_of(over)["code"] == "quota_exceeded"
    usage = api.carol.get("quota").json()["quotas"]
    assert next(q for q in usage if q["quota"] == "gpus")["in_use"] == 1
    run_id = first.json()["id"]
    assert api.carol.post(f"quantization/runs/{run_id}/cancel").status_code == 403
    assert api.dave.post(f"quantization/runs/{run_id}/cancel").json()["status"] == "cancelled"
    assert api.dave.post(f"quantization/runs/{run_id}/cancel").status_code == 409
    assert [r["status"] for r in api.carol.get("quantization/runs").json()["items"]] == [
        "cancelled"
    ]

    # The month's GPU-hours quota: a run that is going is never stopped; a new one is refused
    # once the month's runs have used it. GPU-hours are fractional (the answer once failed on
    # its integer schema).
    month = datetime.now(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    QuantizationRun.objects.filter(pk=run_id).update(
        started_at=month, finished_at=month + timedelta(hours=3, minutes=9)
    )
    Quota.objects.filter(organization=cast.acme).update(quantization_gpu_hours=3)
    used = _start(api)
    assert used.status_code == 409 and error_of(used)["code"] == "quota_exceeded"
    assert "quantization_gpu_hours" in error_of(used)["message"]
    line = next(
        q for q in api.carol.get("quota").json()["quotas"] if q["quota"] == "quantization_gpu_hours"
    )
    assert line == {"quota": "quantization_gpu_hours", "limit": 3, "in_use": 3.15}
    Quota.objects.filter(organization=cast.acme).update(quantization_gpu_hours=None)

    began = datetime(2026, 11, 3, 10, 0, tzinfo=UTC)
    QuantizationRun.objects.filter(pk=run_id).update(
        name="tiny", started_at=began, finished_at=began + timedelta(hours=2)
    )
    report = api.carol.get("costs?by=key&month=2026-11").json()
    [row] = [r for r in report["rows"] if r["label"] == "quantization tiny"]
    assert row["gpu_hours"] == pytest.approx(2.0)
    assert row["cost"] == pytest.approx(2.0 * get_gpu("H100-SXM").price_per_gpu_hour)
    assert report["gpu_hours"] == pytest.approx(sum(r["gpu_hours"] for r in report["rows"]))
    assert _start(api).status_code == 201  # an ended run holds no GPU
