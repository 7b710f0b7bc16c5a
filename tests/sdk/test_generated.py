"""The SDK's models and the Endpoint JSON Schema are what the control plane publishes today.

Both files are generated and committed (the SDK installs without the control plane); these
tests regenerate them from the live sources and compare, so they cannot drift. After changing
an API schema or the RuntimeSpec, refresh both with ``.venv/bin/python sdk/generate_models.py
--write`` (from the repository root).
"""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml
from django.test import Client

from runtime.sim.launcher import REPO_ROOT

SDK = REPO_ROOT / "sdk"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_models", SDK / "generate_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _openapi() -> dict[str, Any]:
    response = Client().get("/api/v1/openapi.json")
    assert response.status_code == 200
    return dict(response.json())


def test_the_sdk_models_are_generated_from_the_live_openapi_document() -> None:
    committed = (SDK / "plinth" / "models.py").read_text(encoding="utf-8")
    assert _generator().generate(_openapi()) == committed, (
        "sdk/plinth/models.py is stale: run .venv/bin/python sdk/generate_models.py --write"
    )


def test_the_endpoint_json_schema_is_generated_from_the_runtime_spec() -> None:
    committed = (SDK / "plinth" / "schemas" / "endpoint.schema.json").read_text(encoding="utf-8")
    assert _generator().endpoint_schema_text() == committed, (
        "the Endpoint schema is stale: run .venv/bin/python sdk/generate_models.py --write"
    )


DOCUMENT = """
apiVersion: plinth.dev/v1
kind: Endpoint
metadata:
  name: llama-chat
  labels: {team: search}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct}
  hardware: {gpu: H100-SXM}
"""


@pytest.mark.parametrize(
    ("edit", "valid"),
    [
        (lambda d: d, True),
        (lambda d: d["spec"]["hardware"].pop("gpu"), False),  # a required setting
        (lambda d: d["spec"].update(parallelism={"tpp": 2}), False),  # a misspelt one
        (lambda d: d["metadata"].update(name="Not A Slug"), False),
        (lambda d: d.update(kind="Deployment"), False),
    ],
)
def test_editors_validate_endpoint_documents_with_the_published_schema(
    edit: Any, valid: bool
) -> None:
    schema = json.loads((SDK / "plinth" / "schemas" / "endpoint.schema.json").read_text())
    document = yaml.safe_load(DOCUMENT)
    edit(document)
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(document))
    assert (errors == []) is valid, errors
