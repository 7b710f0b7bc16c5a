"""Declarative endpoints: ``Endpoint`` documents in YAML, planned and applied against the API.

A document::

    apiVersion: plinth.dev/v1
    kind: Endpoint
    metadata:
      name: llama-chat          # the endpoint's slug
      labels: {team: search}
    spec: {...}                 # a RuntimeSpec (schemas/endpoint.schema.json)

``plan`` asks the API what each document would change (``POST /validate`` with the endpoint:
the same field diff as the revision diff, against the target revision, which it also names);
``apply`` creates the missing endpoints and saves a new revision only where settings differ,
sending that target revision as ``base_revision`` so a change saved by someone else in between is
a conflict, not an overwrite. Every endpoint an apply creates carries the ownership label
``plinth.dev/managed-by=<owner>``; ``prune`` deletes those labelled endpoints no document names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from plinth.client import Plinth
from plinth.errors import NotFound, PlinthError

API_VERSION = "plinth.dev/v1"
KIND = "Endpoint"
OWNER_LABEL = "plinth.dev/managed-by"
DEFAULT_OWNER = "plinth-apply"


class DocumentError(PlinthError):
    """A document that is not a valid ``Endpoint`` (file and reason in the message)."""


@dataclass(frozen=True)
class EndpointDocument:
    name: str
    spec: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)
    display_name: str = ""
    source: str = ""


@dataclass
class Action:
    """What applying one document does: ``create``, ``update``, ``unchanged`` or ``delete``."""

    kind: str
    name: str
    changes: list[dict[str, Any]] = field(default_factory=list)
    base_revision: int | None = None
    labels_changed: bool = False
    document: EndpointDocument | None = None
    result: str = ""


def _document(raw: Any, source: str) -> EndpointDocument:
    if not isinstance(raw, dict):
        raise DocumentError(f"{source}: a document must be a mapping", code="invalid_document")
    if raw.get("apiVersion") != API_VERSION or raw.get("kind") != KIND:
        raise DocumentError(
            f"{source}: expected apiVersion {API_VERSION} and kind {KIND}", code="invalid_document"
        )
    metadata = raw.get("metadata") or {}
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str) or not name:
        raise DocumentError(
            f"{source}: metadata.name (the slug) is required", code="invalid_document"
        )
    spec = raw.get("spec")
    if not isinstance(spec, dict):
        raise DocumentError(f"{source}: spec (a RuntimeSpec) is required", code="invalid_document")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise DocumentError(
            f"{source}: metadata.labels must map names to strings", code="invalid_document"
        )
    return EndpointDocument(
        name=name,
        spec=spec,
        labels={str(k): v for k, v in labels.items()},
        display_name=str(metadata.get("displayName") or ""),
        source=source,
    )


def load_documents(path: str | Path) -> list[EndpointDocument]:
    """Every ``Endpoint`` in a file or a directory's ``*.yaml``/``*.yml`` (several per file with
    ``---``), in file order; a name given twice is an error."""
    root = Path(path)
    files = (
        sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml"))
        if root.is_dir()
        else [root]
    )
    documents: list[EndpointDocument] = []
    for file in files:
        for index, raw in enumerate(yaml.safe_load_all(file.read_text(encoding="utf-8"))):
            if raw is not None:
                documents.append(_document(raw, f"{file}#{index + 1}"))
    seen: dict[str, str] = {}
    for doc in documents:
        if doc.name in seen:
            raise DocumentError(
                f"{doc.name} is defined twice: {seen[doc.name]} and {doc.source}", code="duplicate"
            )
        seen[doc.name] = doc.source
    return documents


def _labels(doc: EndpointDocument, owner: str) -> dict[str, str]:
    return {**doc.labels, OWNER_LABEL: owner}


def plan(
    client: Plinth,
    documents: list[EndpointDocument],
    *,
    owner: str = DEFAULT_OWNER,
    prune: bool = False,
) -> list[Action]:
    """What applying ``documents`` would do, asking the API (nothing is changed)."""
    actions: list[Action] = []
    for doc in documents:
        try:
            deployed = client.endpoints.get(doc.name)
        except NotFound:
            checked = client.endpoints.validate(doc.spec)
            _raise_invalid(doc, checked)
            actions.append(Action("create", doc.name, document=doc))
            continue
        checked = client.endpoints.validate(doc.spec, compare_to=doc.name)
        _raise_invalid(doc, checked)
        changes = [c.model_dump() for c in checked.changes or []]
        labels_changed = deployed.labels != _labels(doc, owner)
        kind = "update" if changes or labels_changed else "unchanged"
        actions.append(
            Action(
                kind,
                doc.name,
                changes=changes,
                base_revision=checked.target_revision,
                labels_changed=labels_changed,
                document=doc,
            )
        )
    if prune:
        named = {doc.name for doc in documents}
        for endpoint in client.endpoints.list(labels={OWNER_LABEL: owner}):
            if endpoint.slug not in named and endpoint.status != "deleting":
                actions.append(Action("delete", endpoint.slug))
    return actions


def _raise_invalid(doc: EndpointDocument, checked: Any) -> None:
    errors = [i for i in checked.issues if i.severity == "error"]
    if not checked.valid:
        from plinth.errors import FieldError, ValidationFailed

        raise ValidationFailed(
            message=f"{doc.source}: the settings of {doc.name} are invalid",
            status=422,
            code="invalid_spec",
            # The API's paths start at the request root (``spec.parallelism.tp``) already.
            fields=[FieldError(i.field, i.code, i.message, i.fix) for i in errors],
        )


def apply(
    client: Plinth, actions: list[Action], *, owner: str = DEFAULT_OWNER, message: str = ""
) -> list[Action]:
    """Carry out a plan; each action's ``result`` says what happened. Stops at the first error
    (e.g. :class:`~plinth.errors.Conflict` when a revision was saved after the plan)."""
    for action in actions:
        doc = action.document
        if action.kind == "create" and doc is not None:
            created = client.endpoints.create(
                doc.name,
                doc.spec,
                name=doc.display_name,
                labels=_labels(doc, owner),
                message=message,
            )
            action.result = f"created (revision {created.target_revision})"
        elif action.kind == "update" and doc is not None and action.base_revision is not None:
            updated = client.endpoints.update(
                doc.name,
                doc.spec,
                base_revision=action.base_revision,
                labels=_labels(doc, owner),
                message=message,
                name=doc.display_name or None,
            )
            action.result = f"updated (revision {updated.target_revision})"
        elif action.kind == "delete":
            client.endpoints.delete(action.name)
            action.result = "deleted"
        else:
            action.result = "unchanged"
    return actions
