"""``client.quantization``: quantize a model in the platform (a run of the tool: recipes, or
proposed ones, each candidate measured by KL against the original and priced), compare its
candidates, deploy one (a canary gated by KL, or a new revision), the quantized models with
their provenance, and calibration samples."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, cast

from plinth import models
from plinth.resources import Resource
from plinth.transport import API, DEFAULT_PAGE, clean, request

RUNS = f"{API}/quantization/runs"


class Quantization(Resource):
    def start(
        self,
        *,
        format: str,
        source_model: str = "",
        endpoint: str | None = None,
        recipes: Sequence[dict[str, Any]] | None = None,
        propose: bool = False,
        calibration_set: str | None = None,
        samples: int = 64,
        max_seq_len: int = 512,
        gpu: str = "",
        gpus: int = 1,
        name: str = "",
    ) -> models.QuantizationRunOut:
        """Start a run on ``source_model`` (a model cache path or hub id) or ``endpoint``'s model;
        ``recipes`` to try, or ``propose`` to let the tool choose by per-layer sensitivity."""
        body = clean(
            {
                "format": format, "source_model": source_model, "deployment": endpoint,
                "recipes": list(recipes) if recipes else None, "propose": propose,
                "calibration_set": calibration_set, "samples": samples,
                "max_seq_len": max_seq_len, "gpu": gpu, "gpus": gpus, "name": name,
            }
        )  # fmt: skip
        return cast(
            "models.QuantizationRunOut",
            self._c._call(request("POST", RUNS, json=body, model=models.QuantizationRunOut)),
        )

    def list(self, *, page_size: int = DEFAULT_PAGE) -> Any:
        return self._c._pages(RUNS, {}, models.QuantizationRunOut, page_size)

    def get(self, run_id: str) -> models.QuantizationRunOut:
        """The run's status, phase, per-layer sensitivity and candidates."""
        path = f"{RUNS}/{run_id}"
        return cast(
            "models.QuantizationRunOut",
            self._c._call(request("GET", path, model=models.QuantizationRunOut)),
        )

    def cancel(self, run_id: str) -> models.QuantizationRunOut:
        path = f"{RUNS}/{run_id}/cancel"
        return cast(
            "models.QuantizationRunOut",
            self._c._call(request("POST", path, json={}, model=models.QuantizationRunOut)),
        )

    def compare(self, run_id: str) -> models.QuantizationCompareOut:
        """Each candidate against the all-layers recipe, and which are on the frontier."""
        path = f"{RUNS}/{run_id}/compare"
        return cast(
            "models.QuantizationCompareOut",
            self._c._call(request("GET", path, model=models.QuantizationCompareOut)),
        )

    def deploy(
        self, run_id: str, candidate: str, *, endpoint: str, mode: str = "canary", weight: int = 10
    ) -> models.QuantizationDeployOut:
        """The candidate's checkpoint on ``endpoint``: a canary at ``weight`` percent with the
        KL quality gate (``mode="canary"``), or a new revision (``mode="revision"``)."""
        body = {"deployment": endpoint, "candidate": candidate, "mode": mode, "weight": weight}
        path = f"{RUNS}/{run_id}/deploy"
        return cast(
            "models.QuantizationDeployOut",
            self._c._call(request("POST", path, json=body, model=models.QuantizationDeployOut)),
        )

    def artifacts(self, *, page_size: int = DEFAULT_PAGE) -> Any:
        """Quantized checkpoints (model sources) with their provenance."""
        return self._c._pages(f"{API}/quantization/artifacts", {}, models.ArtifactOut, page_size)

    def upload_calibration(
        self, name: str, texts: Iterable[str], *, retention_days: int = 30
    ) -> models.CalibrationSetOut:
        """A calibration set of ``texts`` (deleted after ``retention_days``)."""
        jsonl = "".join(json.dumps({"text": t}) + "\n" for t in texts)
        body = {"name": name, "samples": jsonl, "retention_days": retention_days}
        path = f"{API}/quantization/calibration-sets"
        return cast(
            "models.CalibrationSetOut",
            self._c._call(request("POST", path, json=body, model=models.CalibrationSetOut)),
        )
