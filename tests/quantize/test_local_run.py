"""A quantization run on the local cluster end to end (issue 31 part B): the platform starts the
real tool (llmcompressor, tools/quantize, in its own virtualenv) as a process through the local
driver on a small model in the local model cache, reads its JSON-lines events into the run's
records, registers each candidate's checkpoint as a model source, and deploys one as a new
revision whose engines load it from the cache.

The run is driven by the driving task's own function (``quantization.run.drive``), once for no
time at all (a worker that stopped after starting the process) and then again, re-attaching to
the same process and reading its output from the start: the events are recorded once and the
process is not started twice. The model is make_model.py's (the tool's tests' builder).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controlplane.access import Actor
from deployments.clusters.drivers import local_options
from deployments.drivers.local.driver import LocalDriver
from deployments.endpoints import services as endpoints
from deployments.endpoints.reconcile import revision_plan
from deployments.quantization import queries, run, services
from deployments.quantization.models import RunStatus
from runtime.spec import MODEL_CACHE_PATH
from tests.conftest import Cast
from tests.quantize.conftest import tool_python

RECIPES = [{"name": "all"}, {"name": "keep-2", "keep_bf16": ["model.layers.2.*"]}]
SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}


@pytest.fixture
def local_cache(tmp_path: Path, settings: Any, small_model: Path) -> Path:
    """This machine's model cache, holding the small model at ``tiny-llama``."""
    cache = tmp_path / "model-cache"
    settings.PLINTH_MODEL_CACHE_DIR = cache
    settings.PLINTH_LOCAL_RUN_DIR = tmp_path / "run"
    settings.PLINTH_QUANTIZE_PYTHON = tool_python()
    shutil.copytree(small_model, cache / "tiny-llama")
    return cache


def _drive_to_the_end(run_id: str) -> None:
    for _ in range(100):
        if run.drive(run_id, pass_s=60, poll_s=0.5) == run.DONE:
            return
    pytest.fail("the run did not end")


@pytest.mark.django_db
def test_a_run_quantizes_for_real_and_its_checkpoint_deploys(cast: Cast, local_cache: Path) -> None:
    actor: Actor = cast.actor(cast.dave, cast.acme)
    endpoint = endpoints.create_deployment(actor, slug="chat", name="Chat", spec=SPEC)
    started = services.start_run(
        actor, format="fp8", source_model=f"{MODEL_CACHE_PATH}/tiny-llama", recipes=RECIPES,
        samples=4, max_seq_len=48, name="tiny",
    )  # fmt: skip
    run_id = str(started.pk)

    assert run.drive(run_id, pass_s=0) == run.CONTINUING  # started, then its worker went away
    _drive_to_the_end(run_id)

    finished = queries.get_run(actor, run_id)
    assert (finished.status, finished.phase, finished.attempt) == (RunStatus.SUCCEEDED, "done", 1)
    # Bookkeeping, not a timing: its GPU-seconds are its GPUs over the span it recorded.
    assert finished.started_at is not None and finished.finished_at is not None
    span = (finished.finished_at - finished.started_at).total_seconds()
    assert finished.gpu_seconds == pytest.approx(finished.gpus * span) and finished.error == ""
    kinds = [e.kind for e in finished.events.all()]
    assert kinds[0] == "phase" and kinds[-1] == "done" and kinds.count("candidate") == 2
    made = {c.name: c for c in queries.candidates_of(finished)}
    assert set(made) == {"all", "keep-2"}
    out = f"{MODEL_CACHE_PATH}/plinth-quantized/{run_id}"
    for name, candidate in made.items():
        assert candidate.mean_kl > 0 and 0 < candidate.top1 <= 1
        assert candidate.quantization == "compressed-tensors"
        assert candidate.tool == {"name": "llmcompressor", "version": "0.14.0.1"}
        assert candidate.artifact.path == f"{out}/{name}"
        config = json.loads(
            (local_cache / f"plinth-quantized/{run_id}/{name}/config.json").read_text()
        )
        assert "quantization_config" in config
    assert made["keep-2"].quantized_fraction < made["all"].quantized_fraction == 1.0

    deployed = services.deploy_candidate(
        actor, run_id, "keep-2", deployment="chat", mode="revision"
    )
    revision = endpoint.revisions.get(number=deployed["revision"])
    assert revision.spec["model"]["source"] == f"{out}/keep-2"
    assert queries.artifact_of_revision(revision) == made["keep-2"].artifact
    plan = revision_plan(endpoint, revision)
    engine = next(role for role in plan.plan.roles if role.role == "engine")
    argv = LocalDriver(local_options()).engine_argv(engine, 30000)
    loaded = argv[argv.index("--model-path") + 1]
    assert loaded == str(local_cache / f"plinth-quantized/{run_id}/keep-2")
    assert argv[argv.index("--served-model-name") + 1] == SPEC["model"]["source"]


@pytest.mark.django_db
def test_a_run_whose_process_died_is_started_again_as_its_next_attempt(
    cast: Cast, tmp_path: Path, settings: Any
) -> None:
    """Attempt 1's process is gone without a word (its folder has a pid, no exit status): the
    next pass starts attempt 2. That one runs the tool with a Python that lacks the library
    (the main virtualenv's), so it fails at once and says so: the run ends failed, naming it."""
    settings.PLINTH_MODEL_CACHE_DIR = tmp_path / "model-cache"
    settings.PLINTH_LOCAL_RUN_DIR = tmp_path / "run"
    settings.PLINTH_QUANTIZE_PYTHON = sys.executable
    actor: Actor = cast.actor(cast.dave, cast.acme)
    started = services.start_run(
        actor, format="fp8", source_model=f"{MODEL_CACHE_PATH}/tiny-llama", recipes=RECIPES
    )
    claimed = services.claim(str(started.pk))
    assert claimed is not None and services.begin_attempt(claimed)
    services.release(claimed)
    ended = subprocess.Popen(["true"])
    ended.wait()  # reaped: its pid runs nothing any more
    folder = tmp_path / "run" / "quantize" / f"quantize-{str(started.pk)[:8]}-1"
    folder.mkdir(parents=True)
    (folder / "pid").write_text(str(ended.pid))

    _drive_to_the_end(str(started.pk))

    finished = queries.get_run(actor, started.pk)
    assert (finished.status, finished.attempt) == (RunStatus.FAILED, 2)
    assert finished.error
