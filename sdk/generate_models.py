"""Writes ``plinth/models.py`` from Plinth's OpenAPI document, so the SDK's types are the API's.

Usage, from the repository root with the control plane's environment: ``python
sdk/generate_models.py --write`` rewrites both committed files from the live sources. Or one at a
time: ``python sdk/generate_models.py openapi.json > sdk/plinth/models.py`` (``-``: stdin),
and ``python sdk/generate_models.py --endpoint-schema > sdk/plinth/schemas/endpoint.schema.json``
(from the repository root: it reads the RuntimeSpec model itself) for the published JSON Schema
of ``Endpoint`` documents that editors validate against.
A test regenerates the module from the live document and compares it with the committed one, so
the two cannot drift. Only what the document says is used: no hand-written types.
"""

from __future__ import annotations

import json
import keyword
import sys
from pathlib import Path
from typing import Any

HEADER = '''"""Typed models of the Plinth API, generated from /api/v1/openapi.json: do not edit.

Regenerate with ``python sdk/generate_models.py openapi.json > sdk/plinth/models.py``. Models
accept fields a newer server adds (``extra="allow"``) so an older SDK keeps working.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, cast
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field


class ApiModel(BaseModel):
    """Base of every generated model."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_default=True)
'''


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def type_of(schema: dict[str, Any]) -> str:
    """The Python annotation for one JSON Schema (as OpenAPI 3.1 / pydantic writes them)."""
    if "$ref" in schema:
        return ref_name(schema["$ref"])
    if "const" in schema:
        return f"Literal[{schema['const']!r}]"
    if "enum" in schema:
        return "Literal[" + ", ".join(repr(v) for v in schema["enum"]) + "]"
    for union in ("anyOf", "oneOf"):
        if union in schema:
            parts: list[str] = []
            for option in schema[union]:
                part = type_of(option)
                if part not in parts:
                    parts.append(part)
            if "None" in parts:  # None last reads as "optional"
                parts.remove("None")
                parts.append("None")
            return " | ".join(parts)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return type_of(schema["allOf"][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(type_of({**schema, "type": k}) for k in kind)
    if kind == "string":
        return {"date-time": "datetime", "uuid": "UUID"}.get(schema.get("format", ""), "str")
    if kind == "integer":
        return "int"
    if kind == "number":
        return "float"
    if kind == "boolean":
        return "bool"
    if kind == "null":
        return "None"
    if kind == "array":
        return f"list[{type_of(schema.get('items', {}))}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        value = type_of(extra) if isinstance(extra, dict) else "Any"
        return f"dict[str, {value}]"
    return "Any"


def _model_list(annotation: str) -> str:
    """``X`` for an annotation ``list[X]`` where X is a generated model, else ``""``."""
    inner = annotation.removeprefix("list[").removesuffix("]")
    is_model = annotation.startswith("list[") and inner.isidentifier() and inner[0].isupper()
    return inner if is_model and inner not in ("Any",) else ""


def field_line(name: str, schema: dict[str, Any], required: bool) -> str:
    annotation = type_of(schema)
    attr = name if name.isidentifier() and not keyword.iskeyword(name) else f"{name}_"
    args: list[str] = []
    if not required:
        if "default" in schema:
            default = schema["default"]
            if isinstance(default, dict) and annotation.isidentifier() and annotation != "Any":
                # A nested settings group: built as its model, as the server's model builds it.
                args.append(f"default_factory=lambda: {annotation}.model_validate({default!r})")
            elif isinstance(default, list) and default and _model_list(annotation):
                item = _model_list(annotation)
                args.append(
                    f"default_factory=lambda: [{item}.model_validate(v) for v in {default!r}]"
                )
            elif isinstance(default, (list, dict)) and "Literal[" in annotation:
                # The literal's strings read as plain str to a type checker: say what they are.
                args.append(f'default_factory=lambda: cast("{annotation}", {default!r})')
            elif isinstance(default, (list, dict)):
                args.append(f"default_factory=lambda: {default!r}")
            else:
                args.append(repr(default))
        else:
            if "None" not in annotation.split(" | "):
                annotation += " | None"
            args.append("None")
    if attr != name:
        args.append(f"alias={name!r}")
    if not args:
        return f"    {attr}: {annotation}"
    if len(args) == 1 and not args[0].startswith(("alias", "default_factory")):
        return f"    {attr}: {annotation} = {args[0]}"
    return f"    {attr}: {annotation} = Field({', '.join(args)})"


def model_source(name: str, schema: dict[str, Any]) -> str:
    lines = [f"class {name}(ApiModel):"]
    description = (schema.get("description") or name).strip().splitlines()[0]
    lines.append(f"    {json.dumps(description)}")
    properties: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    if properties:
        lines.append("")
    for prop, prop_schema in properties.items():
        lines.append(field_line(prop, prop_schema, prop in required))
    return "\n".join(lines)


def generate(document: dict[str, Any]) -> str:
    """The models module for one OpenAPI document, classes in name order (stable output)."""
    schemas: dict[str, Any] = document["components"]["schemas"]
    parts = [HEADER]
    names = sorted(n for n, s in schemas.items() if s.get("type", "object") == "object")
    for name in names:
        parts.append("\n\n" + model_source(name, schemas[name]) + "\n")
    parts.append("\n\n")
    parts.extend(f"{name}.model_rebuild()\n" for name in names)
    return "".join(parts)


SLUG_PATTERN = "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"


def endpoint_schema(
    spec_schema: dict[str, Any], slug_pattern: str = SLUG_PATTERN, slug_max_length: int = 63
) -> dict[str, Any]:
    """The JSON Schema of an ``Endpoint`` document whose ``spec`` is ``spec_schema`` (a
    RuntimeSpec's ``model_json_schema()``, its ``$defs`` lifted to the top)."""
    spec = dict(spec_schema)
    defs = spec.pop("$defs", {})
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://plinth.dev/schemas/endpoint.schema.json",
        "title": "Plinth Endpoint",
        "description": "An endpoint for `plinth apply`: its slug is metadata.name",
        "type": "object",
        "additionalProperties": False,
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"const": "plinth.dev/v1"},
            "kind": {"const": "Endpoint"},
            "metadata": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": {
                        "type": "string",
                        "pattern": slug_pattern,
                        "maxLength": slug_max_length,
                    },
                    "displayName": {"type": "string", "maxLength": 100},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            },
            "spec": {"$ref": "#/$defs/RuntimeSpec"},
        },
        "$defs": {**defs, "RuntimeSpec": spec},
    }


def _django() -> None:
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()


def served_openapi() -> dict[str, Any]:
    """The OpenAPI document as the control plane serves it at /api/v1/openapi.json."""
    _django()
    from django.test import Client

    response = Client(HTTP_HOST="localhost").get("/api/v1/openapi.json")
    assert response.status_code == 200, response.status_code
    document: dict[str, Any] = response.json()
    return document


def endpoint_schema_text() -> str:
    """The committed ``endpoint.schema.json`` as the control plane's models give it today (run
    from the repository root, with its environment)."""
    _django()
    from deployments.endpoints.models import SLUG_MAX_LENGTH, SLUG_PATTERN
    from runtime.spec import RuntimeSpec

    schema = endpoint_schema(RuntimeSpec.model_json_schema(), SLUG_PATTERN, SLUG_MAX_LENGTH)
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> None:
    if sys.argv[1:] == ["--write"]:
        here = Path(__file__).parent / "plinth"
        (here / "models.py").write_text(generate(served_openapi()), encoding="utf-8")
        (here / "schemas" / "endpoint.schema.json").write_text(endpoint_schema_text())
        return
    if sys.argv[1:] == ["--endpoint-schema"]:
        sys.stdout.write(endpoint_schema_text())
        return
    source = sys.argv[1] if len(sys.argv) > 1 else "-"
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    sys.stdout.write(generate(json.loads(text)))


if __name__ == "__main__":
    main()
