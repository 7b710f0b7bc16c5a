"""Input hygiene shared by every front end: the API, the console, query strings and sign-in.

Two kinds of checks live here, both applied before any view or service sees a value:

- **Unstorable characters.** PostgreSQL text cannot hold NUL, and UTF-8 cannot encode a lone
  surrogate (JSON's ``"\\ud800"``); either one used to surface as a 500 wherever it reached the
  database. :func:`request_refusal` finds the first such character in a request's path, query
  string, form fields, JSON body or headers, and names the field it is in;
  ``controlplane.middleware.InputHygieneMiddleware`` answers it with a 4xx before routing.
- **Whole-string patterns and text limits.** ``re.match`` with ``$`` accepts ``"name\\n"``
  (``$`` also matches before a final newline). :func:`full_pattern` compiles identifier patterns
  anchored with ``\\A``/``\\Z``; :func:`text_problem` is the one check of free text (length,
  control characters) the services apply before a value reaches the database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest

# NUL (PostgreSQL text refuses it) and UTF-16 surrogates (UTF-8 cannot encode a lone one).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# Control characters other than tab and newline: never meant in a name or a one-line field.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")
_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")

INVALID_CHARACTERS = "invalid_characters"
TOO_LONG = "too_long"
MISSING = "missing_field"


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused before routing: the field at fault and what is wrong with it."""

    field: str
    message: str  # about the value, without the field's name (the field says which)
    fix: str = "remove the character and send the request again"
    code: str = INVALID_CHARACTERS

    @property
    def summary(self) -> str:
        return f"{self.field}: {self.message}"


def full_pattern(body: str) -> re.Pattern[str]:
    """``body`` compiled to match whole strings only, so ``match`` cannot stop at a newline."""
    return re.compile(rf"\A(?:{body})\Z")


def displayable(text: str) -> str:
    """``text`` safe to echo in a page or a JSON body (unstorable characters replaced)."""
    return _UNSTORABLE.sub("\ufffd", text)


def unstorable_problem(value: str) -> str | None:
    """What makes ``value`` unstorable, or None."""
    found = _UNSTORABLE.search(value)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "contains a NUL character, which cannot be stored"
    return f"contains a lone UTF-16 surrogate (U+{ord(char):04X}), which is not valid text"


def text_problem(value: str, max_length: int) -> tuple[str, str] | None:
    """(code, message) of what is wrong with free text, or None; the message names no field.

    Tabs and line breaks are allowed (descriptions and messages may span lines).
    """
    problem = unstorable_problem(value)
    if problem is not None:
        return INVALID_CHARACTERS, problem
    if len(value) > max_length:
        return TOO_LONG, f"is {len(value)} characters; the limit is {max_length}"
    if _CONTROL.search(value) is not None:
        return INVALID_CHARACTERS, "contains control characters"
    return None


# --- requests ------------------------------------------------------------------------------


def request_refusal(request: HttpRequest, *, forms: bool = True) -> Refusal | None:
    """The first unstorable character anywhere in ``request``, as a Refusal naming its field.

    ``forms``: whether a form body is read as one (the API takes none and refuses it whole).
    """
    for field, value in _request_texts(request, forms=forms):
        problem = unstorable_problem(value)
        if problem is not None:
            return Refusal(field=displayable(field), message=problem)
    return None


def _request_texts(request: HttpRequest, *, forms: bool) -> Iterator[tuple[str, str]]:
    yield "path", request.path
    yield from _multi_items(request.GET)
    for name, value in request.headers.items():
        yield f"header {name}", value
    content_type = request.content_type or ""
    if request.method in ("GET", "HEAD", "OPTIONS"):
        return
    try:
        # The whole body first: a multipart form parsed straight from the stream leaves no body,
        # and whatever reads ``request.body`` afterwards raised RawPostDataException (a 500).
        body = request.body
        if forms and content_type.startswith(_FORM_TYPES):
            yield from _multi_items(request.POST)
        else:
            yield from _json_texts(body)
    except RequestDataTooBig:
        return  # the size limit answers this request (413), not the character check


def _multi_items(data: Any) -> Iterator[tuple[str, str]]:
    for name, values in data.lists():
        yield name, name  # a field's name is stored too (the audit log keeps some)
        for value in values:
            if isinstance(value, str):
                yield name, value


def _json_texts(body: bytes) -> Iterator[tuple[str, str]]:
    """Every key and string of a JSON body with its dotted path; nothing for non-JSON."""
    if not body:
        return
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return  # not JSON: the view that reads the body refuses it (400)
    # Iterative, not recursive: a body is up to 1 MiB, deep enough to exhaust the stack.
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            yield path or "body", node
        elif isinstance(node, dict):
            for key, value in node.items():
                child = f"{path}.{key}" if path else str(key)
                yield child, str(key)
                stack.append((child, value))
        elif isinstance(node, list):
            stack.extend((f"{path}.{i}" if path else str(i), v) for i, v in enumerate(node))
