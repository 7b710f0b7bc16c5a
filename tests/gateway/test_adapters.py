"""Which model a request calls on an endpoint with LoRA adapters (``gateway.adapters``), as pure
functions of the route table: by adapter name, SGLang's ``<served>:<adapter>`` or the base's
name; rewritten to SGLang's form; 404 naming ``model`` (or ``lora_path``) for a name not
served, 403 for an adapter outside the key's scope; an endpoint without adapters is left as it
was. The gateway process doing it is tests/endpoints/test_lora_end_to_end.py."""

from __future__ import annotations

import orjson
import pytest

from gateway.adapters import choose_model, models_list
from gateway.errors import GatewayError
from gateway.inbound import ROUTES, Prepared, prepare
from gateway.routes import Endpoint, InferenceKey

CHAT, GENERATE = ROUTES["/v1/chat/completions"], ROUTES["/generate"]
TUNED = Endpoint(
    id="e", slug="tuned", organization_id="o", status="active", desired_state="running",
    ready_replicas=1, router_url="http://r", served_name="chat",
    adapters=frozenset({"legal", "sql"}),
)  # fmt: skip
PLAIN = Endpoint(
    id="p", slug="plain", organization_id="o", status="active", desired_state="running",
    ready_replicas=1, router_url="http://r", served_name="chat",
)  # fmt: skip


def key(*adapters: str) -> InferenceKey:
    return InferenceKey(
        id="k", prefix="p", key_hash="h", organization_id="o", allowed_endpoint_ids=frozenset(),
        requests_per_minute=None, tokens_per_minute=None, expires_at=None,
        allowed_adapters=frozenset(adapters),
    )  # fmt: skip


def call(
    endpoint: Endpoint, model: str, scoped: InferenceKey | None = None, **extra: object
) -> tuple[str, Prepared | None]:
    body = orjson.dumps({"model": model, "messages": [], **extra})
    return choose_model(endpoint, scoped or key(), CHAT, prepare(CHAT, body))


@pytest.mark.parametrize(("model", "adapter"), [("legal", "legal"), ("chat:sql", "sql"),
                                                 ("chat", "")])  # fmt: skip
def test_a_model_names_an_adapter_or_the_base_and_goes_upstream_in_sglangs_form(
    model: str, adapter: str
) -> None:
    chosen, prepared = call(TUNED, model)
    assert chosen == adapter
    assert prepared is not None
    sent = orjson.loads(prepared.body)["model"]
    assert sent == (f"chat:{adapter}" if adapter else "chat")


def test_a_rewritten_stream_still_asks_for_its_usage() -> None:
    _, prepared = call(TUNED, "legal", stream=True)
    assert prepared is not None and prepared.strip_usage_chunk
    sent = orjson.loads(prepared.body)
    assert sent["model"] == "chat:legal" and sent["stream_options"] == {"include_usage": True}


def test_an_unknown_model_is_a_404_naming_the_field() -> None:
    with pytest.raises(GatewayError) as raised:
        call(TUNED, "nope")
    assert (raised.value.status, raised.value.param, raised.value.code) == (
        404, "model", "model_not_found"
    )  # fmt: skip
    native = prepare(GENERATE, orjson.dumps({"text": "hi", "lora_path": "nope"}))
    with pytest.raises(GatewayError) as raised:
        choose_model(TUNED, key(), GENERATE, native)
    assert (raised.value.status, raised.value.param) == (404, "lora_path")


def test_a_scoped_key_calls_only_its_adapters() -> None:
    assert call(TUNED, "legal", key("legal"))[0] == "legal"
    for model in ("sql", "chat"):
        with pytest.raises(GatewayError) as raised:
            call(TUNED, model, key("legal"))
        assert (raised.value.status, raised.value.param) == (403, "model")
    with pytest.raises(GatewayError):
        call(PLAIN, "anything", key("legal"))  # no adapter there: the base, out of its scope


def test_an_endpoint_without_adapters_takes_any_model_as_before() -> None:
    chosen, prepared = call(PLAIN, "default")
    assert (
        chosen == "" and prepared is not None and orjson.loads(prepared.body)["model"] == "default"
    )


def test_the_models_list_shows_the_base_and_the_adapters_the_key_may_call() -> None:
    listed = orjson.loads(models_list(TUNED, key()))["data"]
    assert {m["id"]: m["parent"] for m in listed} == {"chat": None, "legal": "chat", "sql": "chat"}
    scoped = orjson.loads(models_list(TUNED, key("sql")))["data"]
    assert [m["id"] for m in scoped] == ["sql"]
