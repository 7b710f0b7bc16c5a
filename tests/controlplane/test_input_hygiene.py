"""Bad input anywhere is a 4xx, never a 500: every API write operation (read from the OpenAPI
document), every list's query parameters, and every console form (read from the pages' own HTML,
found by walking the URL conf) get NUL bytes, lone surrogates, newline-suffixed identifiers,
over-long strings and odd unicode; every API write gets bodies of every content type (forms,
text, XML, bytes), broken JSON, empty and oversized bodies. New endpoints and forms are covered
without listing them.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane import services as platform
from controlplane.hygiene import full_pattern
from controlplane.models import Role
from deployments.api.app import api as ninja_api
from deployments.endpoints import services
from deployments.endpoints.models import Deployment, slug_validator
from tests.conftest import Cast

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
UNSTORABLE = {"nul": "a\x00b", "surrogate": "a\ud800b"}
# Values that must be refused or stored cleanly, never a 500.
AWKWARD = {
    "newline-suffixed": "chat\n",
    "over-long": "x" * 5000,
    "odd unicode": "\u202eRTL\u200b\ufeff \U0001f999 e\u0301 \uffff",
    "control": "a\x07\x1bb",
    "empty": "",
}
METHODS = ("get", "post", "put", "patch", "delete")


@pytest.fixture
def acme(cast: Cast) -> dict[str, Any]:
    """Acme with an endpoint, a key, a secret: objects for path parameters and forms."""
    owner = cast.actor(cast.alice, cast.acme)
    endpoint = services.create_deployment(owner, slug="chat", name="Chat", spec=SPEC)
    key = platform.create_api_key(owner, name="admin", kind="management", role=Role.ADMIN)
    secret = platform.set_secret(owner, name="token", value="s3cret")
    return {"key": key.plaintext, "endpoint": endpoint, "secret": secret}


def api_client(acme: dict[str, Any]) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {acme['key']}", raise_request_exception=False)


def console_client(cast: Cast) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(cast.alice)
    return client


def assert_error_shape(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"code", "message", "fields"} and error["message"], error
    for item in error["fields"]:
        assert set(item) == {"field", "code", "message", "fix"}, item
        assert not item["message"].startswith(f"{item['field']}:"), item  # no repeated path
    return error  # type: ignore[no-any-return]


# --- the API, from its OpenAPI document -------------------------------------------------------


def _document() -> dict[str, Any]:
    return ninja_api.get_openapi_schema()  # type: ignore[return-value]


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    for key in ("anyOf", "allOf"):
        if key in schema:
            objects = [_resolve(doc, s) for s in schema[key]]
            return next((s for s in objects if s.get("properties")), objects[0])
    return schema


def _string_paths(doc: dict[str, Any], schema: dict[str, Any], depth: int = 0) -> Iterator[str]:
    """Dotted paths of the string properties of a request body (nested objects included)."""
    for name, prop in _resolve(doc, schema).get("properties", {}).items():
        resolved = _resolve(doc, prop)
        if resolved.get("type") == "string" or "string" in str(prop.get("anyOf", "")):
            yield name
        elif resolved.get("properties") and depth < 2:
            yield from (f"{name}.{sub}" for sub in _string_paths(doc, resolved, depth + 1))


def _operations() -> list[tuple[str, str, dict[str, Any]]]:
    doc = _document()
    return [
        (method, path, operation)
        for path, item in doc["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    ]


def _body_fields() -> list[tuple[str, str, str]]:
    doc = _document()
    found = []
    for method, path, operation in _operations():
        content = operation.get("requestBody", {}).get("content", {})
        schema = content.get("application/json", {}).get("schema")
        if schema:
            found += [(method, path, field) for field in _string_paths(doc, schema)]
    return found


def _query_params() -> list[tuple[str, str]]:
    return [
        (path, param["name"])
        for method, path, operation in _operations()
        if method == "get"
        for param in operation.get("parameters", [])
        if param["in"] == "query"
    ]


def _concrete(path: str, acme: dict[str, Any]) -> str:
    values = {
        "slug": "chat",
        "deployment_id": str(acme["endpoint"].pk),
        "secret_id": str(acme["secret"].pk),
    }
    return re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), "1"), path)


def _nested(path: str, value: Any) -> dict[str, Any]:
    body: dict[str, Any] = {}
    node = body
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return body


def test_the_sweep_finds_the_api_writes_and_filters() -> None:
    # Guards the sweep itself: an empty walk would pass vacuously.
    fields = {(m, p, f) for m, p, f in _body_fields()}
    assert ("post", "/api/v1/deployments", "slug") in fields
    assert ("post", "/api/v1/deployments", "spec.model.source") in fields
    assert ("post", "/api/v1/secrets", "description") in fields
    assert ("/api/v1/deployments", "search") in set(_query_params())


@pytest.mark.parametrize("kind", sorted(UNSTORABLE))
@pytest.mark.parametrize(("method", "path", "field"), _body_fields())
def test_unstorable_text_in_any_api_body_is_a_422_naming_the_field(
    acme: dict[str, Any], method: str, path: str, field: str, kind: str
) -> None:
    body = json.dumps(_nested(field, UNSTORABLE[kind]))  # a surrogate goes as "\ud800"
    response = getattr(api_client(acme), method)(
        _concrete(path, acme), body, content_type="application/json"
    )
    assert response.status_code == 422, response.content
    error = assert_error_shape(response)
    assert error["fields"][0]["field"] == field
    assert error["fields"][0]["code"] == "invalid_characters"


@pytest.mark.parametrize("kind", sorted(AWKWARD))
@pytest.mark.parametrize(("method", "path", "field"), _body_fields())
def test_awkward_text_in_any_api_body_is_never_a_server_error(
    acme: dict[str, Any], method: str, path: str, field: str, kind: str
) -> None:
    body = {"slug": "fresh", "name": "Fresh", "spec": SPEC, **_nested(field, AWKWARD[kind])}
    response = getattr(api_client(acme), method)(
        _concrete(path, acme), json.dumps(body), content_type="application/json"
    )
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        assert_error_shape(response)


@pytest.mark.parametrize("value", ["a%00b", "%ED%A0%80", "%FF", quote("chat\n"), "x" * 3000])
@pytest.mark.parametrize(("path", "param"), _query_params())
def test_any_api_query_parameter_is_refused_or_served_never_a_500(
    acme: dict[str, Any], path: str, param: str, value: str
) -> None:
    response = api_client(acme).get(f"{_concrete(path, acme)}?{param}={value}")
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        error = assert_error_shape(response)
        if "%00" in value:
            assert response.status_code == 422
            assert error["fields"][0]["field"] == param


def test_an_api_path_with_a_nul_is_a_422(acme: dict[str, Any]) -> None:
    response = api_client(acme).get("/api/v1/deployments/ch%00at")
    assert response.status_code == 422
    assert assert_error_shape(response)["fields"][0]["field"] == "path"


def test_a_literal_backslash_u0000_in_text_is_kept(acme: dict[str, Any]) -> None:
    # The old byte-level guard refused any body containing the six characters \u0000.
    body = {"slug": "escaped", "name": "a \\u0000 b", "spec": SPEC}
    response = api_client(acme).post(
        "/api/v1/deployments", json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 201, response.content
    assert Deployment.objects.get(slug="escaped").name == "a \\u0000 b"


_ODD = st.sampled_from(["\x00", "\ud800", "\udfff", "\n", "\r", "\u202e", "\ufeff", "\U0001f999"])


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    slug=st.text(st.one_of(st.sampled_from("abc-9"), _ODD), max_size=12),
    name=st.text(st.one_of(st.characters(), _ODD), max_size=30),
)
def test_creating_an_endpoint_with_any_text_is_a_201_or_a_4xx(
    acme: dict[str, Any], slug: str, name: str
) -> None:
    body = json.dumps({"slug": slug, "name": name, "spec": SPEC})
    response = api_client(acme).post("/api/v1/deployments", body, content_type="application/json")
    assert response.status_code in (201, 409, 422), response.content
    if response.status_code == 201:
        assert slug_validator.regex.match(slug) and "\n" not in slug
    else:
        assert_error_shape(response)
    # Whatever was stored, the list still renders for every member.
    assert api_client(acme).get("/api/v1/deployments").status_code == 200


# --- request bodies of every type, to every API write ------------------------------------------

# The API takes UTF-8 JSON only. Anything else is refused before the route runs, whatever the
# route: a multipart form (curl -F) was a 500, because the form was parsed from the stream and
# the API's own checks could no longer read the body.
_MULTIPART = (
    b'--XX\r\nContent-Disposition: form-data; name="f"; filename="a.json"\r\n'
    b'Content-Type: application/json\r\n\r\n{"slug": "x", "name": "X"}\r\n--XX--\r\n'
)
UNTAKEN_TYPES = {
    "multipart": (_MULTIPART, "multipart/form-data; boundary=XX", "multipart/form-data"),
    "multipart, no boundary": (_MULTIPART, "multipart/form-data", "multipart/form-data"),
    "urlencoded": (b"slug=x&name=y", "application/x-www-form-urlencoded", "x-www-form-urlencoded"),
    "text": (b'{"slug": "x", "name": "X"}', "text/plain", "text/plain"),
    "xml": (b"<deployment slug='x'/>", "application/xml", "application/xml"),
    "octet-stream": (b"\x00\x01\xff", "application/octet-stream", "application/octet-stream"),
    "json in latin-1": (b'{"name": "caf\xe9"}', "application/json; charset=latin-1", "latin-1"),
}
BROKEN_JSON = {
    "truncated": (b'{"slug": ', "Expecting value at line 1, column 10"),
    "not utf-8": (b'{"name": "\xff\xfe"}', "byte 10 (0xff) is not UTF-8"),
    "two documents": (b"{} {}", "Extra data"),
    "nested too deeply": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
}


def _writes() -> list[tuple[str, str]]:
    return [(m, p) for m, p, _ in _operations() if m != "get"]


def _body_writes() -> list[tuple[str, str]]:
    return [(m, p) for m, p, operation in _operations() if "requestBody" in operation]


def _send(acme: dict[str, Any], method: str, path: str, body: bytes, content_type: str) -> Any:
    headers = {"HTTP_IDEMPOTENCY_KEY": uuid.uuid4().hex} if method == "post" else {}
    return api_client(acme).generic(
        method.upper(), _concrete(path, acme), body, content_type=content_type, **headers
    )


def test_the_body_sweep_finds_the_api_writes() -> None:
    assert ("post", "/api/v1/deployments") in _body_writes()
    assert ("patch", "/api/v1/deployments/{deployment_id}") in _body_writes()
    assert ("post", "/api/v1/deployments/{deployment_id}/stop") in set(_writes())


@pytest.mark.parametrize("kind", sorted(UNTAKEN_TYPES))
@pytest.mark.parametrize(("method", "path"), _writes())
def test_a_body_of_a_type_the_api_does_not_take_is_a_415_naming_it(
    acme: dict[str, Any], method: str, path: str, kind: str
) -> None:
    body, content_type, named = UNTAKEN_TYPES[kind]
    response = _send(acme, method, path, body, content_type)
    assert response.status_code == 415, response.content
    error = assert_error_shape(response)
    assert error["code"] == "unsupported_media_type" and named in error["message"]
    assert error["fields"][0]["field"] == "Content-Type"
    assert "application/json" in error["fields"][0]["fix"]


@pytest.mark.parametrize("kind", sorted(BROKEN_JSON))
@pytest.mark.parametrize(("method", "path"), _body_writes())
def test_a_body_that_is_not_utf8_json_is_a_400_saying_where(
    acme: dict[str, Any], method: str, path: str, kind: str
) -> None:
    body, problem = BROKEN_JSON[kind]
    response = _send(acme, method, path, body, "application/json")
    assert response.status_code == 400, response.content
    assert problem in assert_error_shape(response)["message"]


@pytest.mark.parametrize(("method", "path"), _body_writes())
def test_an_empty_or_oversized_body_is_a_4xx_naming_it(
    acme: dict[str, Any], method: str, path: str
) -> None:
    empty = _send(acme, method, path, b"", "application/json")
    assert 400 <= empty.status_code < 500, empty.content
    fields = [item["field"] for item in assert_error_shape(empty)["fields"]]
    # A route may refuse its path (a cluster id that is no UUID) or the caller first.
    assert empty.status_code != 422 or "body" in fields, empty.content
    huge = _send(acme, method, path, b"[" + b"0," * 600_000 + b"0]", "application/json")
    assert huge.status_code == 413, huge.content
    assert "larger than" in assert_error_shape(huge)["message"]


@pytest.mark.parametrize("content_type", ["application/json; charset=UTF-8", "", "a/b+json"])
def test_json_is_taken_with_a_charset_a_json_suffix_or_no_type(
    acme: dict[str, Any], content_type: str
) -> None:
    # Scripts that send JSON without saying so (no Content-Type at all) are served: nothing
    # contradicts the body being JSON. A declared type other than JSON is what gets the 415.
    content_type = content_type.replace("a/b", "application/merge-patch")
    body = json.dumps({"slug": "typed", "name": "Typed", "spec": SPEC}).encode()
    response = _send(acme, "post", "/api/v1/deployments", body, content_type)
    assert response.status_code == 201, response.content


_CONTENT_TYPES = st.sampled_from(
    ["application/json", "multipart/form-data; boundary=b", "multipart/form-data", "text/plain",
     "application/x-www-form-urlencoded", "application/json; charset=utf-16", "", "*/*",
     "application/json; charset=\x7f", "multipart/mixed; boundary=\"\""]
)  # fmt: skip


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    route=st.sampled_from(_body_writes()),
    content_type=_CONTENT_TYPES,
    body=st.one_of(st.binary(max_size=200), st.text(max_size=100).map(str.encode)),
)
def test_any_bytes_of_any_type_to_any_api_write_are_a_4xx_or_taken(
    acme: dict[str, Any], route: tuple[str, str], content_type: str, body: bytes
) -> None:
    response = _send(acme, *route, body, content_type)
    assert response.status_code < 500, response.content
    if response.status_code >= 400:
        assert_error_shape(response)


# --- the console, from its URL conf and its pages' forms --------------------------------------


def _console_patterns(
    patterns: list[URLPattern | URLResolver] | None = None, prefix: str = ""
) -> Iterator[str]:
    """Every console route as a template like ``endpoints/<slug:slug>/scale/``."""
    for entry in patterns if patterns is not None else get_resolver().url_patterns:
        route = str(entry.pattern)
        if isinstance(entry, URLResolver):
            if route.startswith(("api/", "admin/")):
                continue  # the API is swept above; the admin is Django's own
            yield from _console_patterns(entry.url_patterns, prefix + route)
        else:
            yield prefix + route


def _console_url(route: str, acme: dict[str, Any]) -> str:
    values = {"slug": "chat", "uuid": str(uuid.uuid4()), "int": "1", "path": "x"}
    return "/" + re.sub(r"<(\w+):\w+>", lambda m: values.get(m.group(1), "x"), route)


class _Forms(HTMLParser):
    """The POST forms of a page: (action, {input name: value})."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = {k: v or "" for k, v in attrs}
        if tag == "form" and named.get("method", "").lower() == "post":
            self.forms.append((named.get("action", ""), {}))
        elif tag in ("input", "select", "textarea") and self.forms and named.get("name"):
            if named.get("type") in ("hidden", "checkbox", "submit"):
                return
            self.forms[-1][1][named["name"]] = named.get("value", "")


def _forms(client: Client, acme: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    found: dict[tuple[str, tuple[str, ...]], tuple[str, dict[str, str]]] = {}
    for route in _console_patterns():
        url = _console_url(route, acme)
        page = client.get(url)
        if page.status_code != 200 or "html" not in page.get("Content-Type", ""):
            continue
        parser = _Forms()
        parser.feed(page.content.decode())
        for action, fields in parser.forms:
            target = action or url
            if fields and not target.startswith(("/logout", "/org/")):
                found[(target, tuple(sorted(fields)))] = (target, fields)
    return list(found.values())


def test_the_console_sweep_finds_the_forms(cast: Cast, acme: dict[str, Any]) -> None:
    actions = {action for action, _ in _forms(console_client(cast), acme)}
    for expected in ("/keys/", "/secrets/", "/members/", "/endpoints/chat/scale/"):
        assert expected in actions


def test_a_nul_in_any_console_form_or_query_is_a_400_page(cast: Cast, acme: dict[str, Any]) -> None:
    client = console_client(cast)
    for route in _console_patterns():
        url = _console_url(route, acme)
        response = client.get(f"{url}?q=a%00b&action=%00&search=%00")
        assert response.status_code == 400, url
        assert b"NUL" in response.content and b"Traceback" not in response.content
    for action, fields in _forms(client, acme):
        for name in fields:
            response = client.post(action, {**fields, name: "a\x00b"})
            assert response.status_code == 400, (action, name)
            assert name.encode() in response.content  # the page names the field


@pytest.mark.parametrize("kind", sorted(AWKWARD))
def test_awkward_text_in_any_console_form_is_never_a_server_error(
    cast: Cast, acme: dict[str, Any], kind: str
) -> None:
    client = console_client(cast)
    for action, fields in _forms(client, acme):
        for name in fields:
            response = client.post(action, {**fields, name: AWKWARD[kind]})
            assert response.status_code < 500, (action, name, response.content[:500])


def test_a_malformed_multipart_console_form_is_a_400_page_saying_so(cast: Cast) -> None:
    response = console_client(cast).post(
        "/keys/", b"name=x", content_type="multipart/form-data; boundary="
    )
    assert response.status_code == 400
    assert b"not a well-formed multipart form" in response.content


@pytest.mark.parametrize("raw", [b"name=%ED%A0%80", b"name=%FF%FE", b"name=a%00b&kind=x"])
def test_undecodable_form_bodies_are_refused_or_replaced(cast: Cast, raw: bytes) -> None:
    response = console_client(cast).post(
        "/keys/", raw, content_type="application/x-www-form-urlencoded"
    )
    assert response.status_code in (400, 422)


def test_the_sign_in_form_refuses_a_nul_before_any_query(db: None) -> None:
    response = Client().post("/login/", {"username": "a\x00", "password": "x"})
    assert response.status_code == 400


# --- identifier patterns match whole strings ----------------------------------------------------


def test_an_identifier_with_a_final_newline_does_not_match() -> None:
    assert slug_validator.regex.match("chat")
    assert not slug_validator.regex.match("chat\n")
    assert not full_pattern("[a-z]+").match("chat\n")


def test_slugs_stored_before_the_fix_are_repaired_and_the_list_renders(
    cast: Cast, acme: dict[str, Any]
) -> None:
    from django.apps import apps

    repair = importlib.import_module("deployments.migrations.0006_slug_full_match")
    owner = cast.actor(cast.alice, cast.acme)
    taken = services.create_deployment(owner, slug="nlrepro", name="Taken", spec=SPEC)
    Deployment.objects.filter(pk=acme["endpoint"].pk).update(slug="nlrepro\n")
    repair.repair_slugs(apps, None)
    repaired = Deployment.objects.get(pk=acme["endpoint"].pk).slug
    assert repaired == f"endpoint-{acme['endpoint'].pk.hex[:8]}"  # "nlrepro" is taken
    assert Deployment.objects.get(pk=taken.pk).slug == "nlrepro"
    assert console_client(cast).get("/endpoints/").status_code == 200


_PATTERN_CALLS = {"compile", "match", "search", "RegexValidator", "full_pattern"}


def _pattern_literals() -> Iterator[tuple[str, int, str]]:
    for package in ("controlplane", "deployments", "runtime", "gateway"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call) or not node.args:
                    continue
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                first = node.args[0]
                literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
                if name in _PATTERN_CALLS and literal:
                    yield str(path.relative_to(ROOT)), node.lineno, first.value  # type: ignore[attr-defined]


# Patterns that copy another program's on purpose, so Plinth decides as that program will.
_MIRRORS = {("runtime/argv.py", r"^-\d+$|^-\d*\.\d+$")}  # argparse's negative-number test


def test_no_pattern_in_the_code_ends_with_a_dollar() -> None:
    # "$" matches before a final newline: "name\n" passed every identifier check that used it.
    offenders = [
        f"{path}:{line} {pattern!r}"
        for path, line, pattern in _pattern_literals()
        if pattern.endswith("$") and not pattern.endswith("\\$") and (path, pattern) not in _MIRRORS
    ]
    assert not offenders, "use \\Z or re.fullmatch: " + ", ".join(offenders)
