"""One error code per class of mistake, whichever layer finds it (schema, spec parser, rules,
services, input hygiene), and field messages that leave the path to ``field``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.conftest import SPEC, Clients, error_of, spec_with


def _deployment(**fields: Any) -> dict[str, Any]:
    return {"slug": "chat", "spec": SPEC, **fields}


# (class, path, body, field): every row of a class must get the same field code.
CASES = [
    ("missing_field", "deployments", {"spec": SPEC}, "slug"),
    ("missing_field", "deployments", _deployment(slug=""), "slug"),
    ("missing_field", "api-keys", {"name": "", "kind": "inference"}, "name"),
    ("missing_field", "deployments", {"slug": "chat", "spec": {"hardware": {"gpu": "H200"}}},
     "spec.model"),
    ("too_long", "deployments", _deployment(name="x" * 101), "name"),
    ("too_long", "api-keys", {"name": "x" * 101, "kind": "inference"}, "name"),
    ("too_long", "secrets", {"name": "s", "value": "v", "description": "d" * 201}, "description"),
    ("invalid_characters", "deployments", _deployment(name="bad\x07bell"), "name"),
    ("invalid_characters", "deployments", _deployment(name="nul\x00"), "name"),
    ("invalid_characters", "api-keys", {"name": "\ud800", "kind": "inference"}, "name"),
]  # fmt: skip


@pytest.mark.parametrize(("code", "path", "body", "field"), CASES)
def test_each_class_of_mistake_has_one_code(
    api: Clients, code: str, path: str, body: dict[str, Any], field: str
) -> None:
    response = api.alice.post(path, body)
    assert response.status_code == 422, response.content
    [item] = [f for f in error_of(response)["fields"] if f["field"] == field]
    assert item["code"] == code
    assert not item["message"].startswith(field.removeprefix("spec.")), item


@pytest.mark.parametrize(
    "spec",
    [
        spec_with(hardware={"gpu": "TPU-v9"}),  # refused by the spec's parser
        spec_with(parallelism={"tp": 3}),  # refused by a rule
        spec_with(parallelism={"tp": "2"}),  # refused by the schema (a string for a number)
    ],
)
def test_every_refused_spec_is_invalid_spec_with_the_path_once(
    api: Clients, endpoint: Any, spec: dict[str, Any]
) -> None:
    created = api.dave.post("deployments", {"slug": "other", "spec": spec})
    edited = api.dave.patch("deployments/chat", {"spec": spec, "base_revision": 1})
    for response in (created, edited):
        assert response.status_code == 422, response.content
        error = error_of(response)
        assert error["code"] == "invalid_spec"
        first = error["fields"][0]
        assert first["field"].startswith("spec.")
        path = first["field"].removeprefix("spec.")
        assert error["message"].startswith(f"the settings are invalid: {path}: ")
        for item in error["fields"]:
            relative = item["field"].removeprefix("spec.")
            assert relative not in item["message"].split(":")[0], item
