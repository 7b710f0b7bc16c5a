"""The NinjaAPI instance: route groups, auth, error handlers, and the OpenAPI document.

Every operation documents its success response; the document adds the shared error shape as
``4XX`` to every operation and ``Idempotency-Key`` to every POST, so generated clients know both.
"""

from __future__ import annotations

from typing import Any

from ninja import NinjaAPI
from ninja.openapi.schema import OpenAPISchema

from deployments.api import audit, errors, keys, members, secrets
from deployments.api.auth import KeyOrSession
from deployments.api.schemas import ErrorOut
from deployments.api.throttle import CallerThrottle
from deployments.clusters import api as clusters
from deployments.costs import api as costs
from deployments.endpoints.api import adapters, catalog, deployments, observe, revisions
from deployments.experiments.api import benchmarks, canary, quality
from deployments.fleet import api as fleet
from deployments.quantization import api as quantization
from deployments.quotas import api as quotas
from deployments.starts import api as starts
from deployments.traffic import api as traffic

DESCRIPTION = """Manage Plinth's dedicated inference endpoints.

Authenticate with `Authorization: Bearer <management key>` (create one in the console, or with
`manage.py plinth_create_key`). Request bodies are JSON (`Content-Type: application/json`); any
other body is refused with 415. Every error has the shape
`{"error": {"code", "message", "fields": [{"field", "code", "message", "fix"}]}}`.
Send `Idempotency-Key: <unique string>` with a POST to make retries safe.
"""

IDEMPOTENCY_PARAMETER = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "a retry by the same caller (key or signed-in user) with the same key and body returns "
        "the first response, if the caller still holds the role it ran with"
    ),
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}


class PlinthAPI(NinjaAPI):
    def get_openapi_schema(self, **kwargs: Any) -> OpenAPISchema:
        schema = super().get_openapi_schema(**kwargs)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components.update(ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
                          .pop("$defs", {}))  # fmt: skip
        components["ErrorOut"] = ErrorOut.model_json_schema(
            ref_template="#/components/schemas/{model}"
        )
        components["ErrorOut"].pop("$defs", None)
        error_response = {
            "description": "the request was refused; see error.code and error.fields",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
        }
        for methods in schema["paths"].values():
            for method, operation in methods.items():
                operation["responses"]["4XX"] = error_response
                if method == "post":
                    operation.setdefault("parameters", []).append(IDEMPOTENCY_PARAMETER)
        return schema


def build_api() -> PlinthAPI:
    api = PlinthAPI(
        title="Plinth management API",
        version="1",
        description=DESCRIPTION,
        urls_namespace="api-v1",
        auth=KeyOrSession(),
        throttle=CallerThrottle(),
    )
    for module in (
        deployments,
        revisions,
        adapters,
        canary,
        quality,
        benchmarks,
        observe,
        traffic,
        catalog,
        keys,
        secrets,
        clusters,
        fleet,
        members,
        audit,
        quotas,
        starts,
        costs,
        quantization,
    ):
        api.add_router("", module.router)
    errors.install(api)
    return api


api = build_api()
