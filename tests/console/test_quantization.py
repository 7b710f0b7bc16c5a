"""The quantization pages: a developer starts a run from the form (a refusal names the field),
the run's page shows its progress, per-layer sensitivity and the candidates' frontier as an
inline SVG chart, polls only while the run goes on (286 once it ended), deploys a candidate as
a new revision, and the quantized models page shows each checkpoint's provenance."""

from __future__ import annotations

import json

from deployments.drivers.base import QUANTIZE_RUNNING, QuantizationProgress
from deployments.endpoints.models import Deployment
from deployments.quantization import services
from deployments.quantization.models import QuantizationRun, RunStatus
from runtime.spec import MODEL_CACHE_PATH
from tests.conftest import Cast
from tests.console.conftest import signed_in


def _candidate(name: str, kl: float, share: float) -> str:
    return json.dumps(
        {
            "event": "candidate", "name": name, "recipe": {"name": name}, "mean_kl": kl,
            "top1": 0.9, "quantized_fraction": share, "bits_per_weight": 16 - 8 * share,
            "checkpoint": f"/seen/{name}", "quantization": "compressed-tensors",
            "tool": {"name": "llmcompressor", "version": "0.14.0.1"},
            "calibration_sha256": "c" * 64,
        }
    )  # fmt: skip


LINES = (
    json.dumps({"event": "sensitivity", "layers": [{"name": "model.layers.0", "kl": 0.01},
                                                    {"name": "model.layers.1", "kl": 0.04}]}),
    json.dumps({"event": "phase", "phase": "evaluating", "candidate": "keep-1"}),
    _candidate("all-layers", 0.03, 1.0),
    _candidate("keep-1", 0.01, 0.5),
)  # fmt: skip


def test_a_run_from_the_form_to_a_deployed_revision(cast: Cast, endpoint: Deployment) -> None:
    dave = signed_in(cast.dave)
    refused = dave.post("/quantization/", {"format": "int3", "propose": "on"}, follow=True)
    assert "format: one of" in refused.content.decode()
    source = f"{MODEL_CACHE_PATH}/tiny"
    started = dave.post(
        "/quantization/", {"format": "fp8", "source_model": source, "propose": "on"}
    )
    assert started.status_code == 302
    run = QuantizationRun.objects.get()
    services.begin_attempt(run)
    services.record_progress(run, QuantizationProgress(QUANTIZE_RUNNING, LINES, "", "/seen"))

    page = dave.get(f"/quantization/{run.pk}/").content.decode()
    assert 'id="frontier-chart"' in page and page.count('class="frontier-point"') == 2
    assert "<polyline" in page and "style=" not in page  # the CSP blocks style attributes
    assert "model.layers.1" in page and 'id="run-phase">evaluating<' in page
    polled = dave.get(f"/quantization/{run.pk}/", headers={"HX-Request": "true"})
    assert polled.status_code == 200 and 'hx-trigger="every 3s"' in polled.content.decode()

    services.finish(run, RunStatus.SUCCEEDED)
    assert dave.get(f"/quantization/{run.pk}/", headers={"HX-Request": "true"}).status_code == 286
    deployed = dave.post(
        f"/quantization/{run.pk}/deploy/",
        {"candidate": "keep-1", "deployment": "chat", "mode": "revision"},
    )
    assert deployed.status_code == 302
    target = Deployment.objects.get(pk=endpoint.pk).target_revision
    assert target is not None and target.spec["model"]["source"].endswith(f"/{run.pk}/keep-1")

    models = signed_in(cast.carol).get("/quantization/models/").content.decode()
    assert f"plinth-quantized/{run.pk}/keep-1" in models and "llmcompressor 0.14.0.1" in models
    assert "Deploy" not in signed_in(cast.carol).get(f"/quantization/{run.pk}/").content.decode()
