"""The OpenAPI document: valid OpenAPI 3, the shared error shape on every operation, and every
documented route exercised by the API tests (the last test of the session)."""

from __future__ import annotations

from typing import Any

import pytest
from openapi_spec_validator import validate

from tests.api.conftest import ROUTES_HIT, Clients

METHODS = {"get", "post", "put", "patch", "delete"}


def document(api: Clients) -> dict[str, Any]:
    response = api.anonymous.get("openapi.json")
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


def operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in METHODS
    }


def test_the_document_is_valid_openapi_3(api: Clients) -> None:
    doc = document(api)
    assert doc["openapi"].startswith("3.")
    validate(doc)
    assert doc["components"]["securitySchemes"]["KeyOrSession"]["scheme"] == "bearer"


def test_every_operation_documents_the_error_shape_and_posts_take_idempotency_keys(
    api: Clients,
) -> None:
    doc = document(api)
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            error = operation["responses"]["4XX"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorOut"}, (method, path)
            assert any(code.startswith("2") for code in operation["responses"]), (method, path)
            names = {p["name"] for p in operation.get("parameters", [])}
            assert ("Idempotency-Key" in names) == (method == "post"), (method, path)
            assert operation.get("security") or doc.get("security") or path.endswith("openapi.json")


@pytest.mark.openapi_coverage
def test_every_documented_route_is_exercised_by_a_test(api: Clients) -> None:
    # conftest runs this last, and only when every API test module ran in the session.
    missing = operations(document(api)) - ROUTES_HIT
    assert not missing, f"documented but never requested by a test: {sorted(missing)}"
