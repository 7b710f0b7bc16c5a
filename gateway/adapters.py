"""Which model a request calls on an endpoint that serves LoRA adapters, and its models list.

An endpoint's serving revision names its adapters (``lora.adapters``, read into the route table
by ``gateway.loader``). A request picks one by ``model``: the adapter's name, SGLang's own
``"<served_name>:<adapter>"``, or the base model's served name for the base itself; a native
``/generate`` by ``lora_path``. The gateway sends SGLang the form it understands
(``"<served_name>:<adapter>"``), checks the key's adapter scope (``InferenceKey.allowed_adapters``)
and tells the meter which adapter answered. A name the endpoint does not serve is a 404 in
OpenAI's shape naming ``model``, before anything is forwarded.

An endpoint with no adapters is left as before: SGLang answers any ``model`` with its base, and
clients rely on that (``"model": "default"``); only a key scoped to adapters is refused there.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.errors import GatewayError
from gateway.inbound import Prepared, Route
from gateway.routes import Endpoint, InferenceKey

BASE = ""  # the adapter of a request to the base model


def choose_model(
    endpoint: Endpoint, key: InferenceKey, route: Route, prepared: Prepared | None
) -> tuple[str, Prepared | None]:
    """(the adapter the request calls, "" for the base model; the request as sent upstream).

    Raises 404 for a model the endpoint does not serve and 403 for one the key may not call."""
    payload = prepared.payload if prepared is not None else None
    if prepared is None or payload is None:
        return BASE, prepared
    if route.openai:
        adapter = _openai_adapter(endpoint, payload.get("model"))
    else:
        adapter = _native_adapter(endpoint, payload.get("lora_path"))
    _check_scope(key, adapter, "model" if route.openai else "lora_path")
    if not adapter or not route.openai or payload.get("model") == endpoint.adapter_model(adapter):
        return adapter, prepared
    return adapter, _renamed(prepared, payload, endpoint.adapter_model(adapter))


def _openai_adapter(endpoint: Endpoint, model: Any) -> str:
    if not endpoint.adapters:
        return BASE
    name = str(model)
    if name == endpoint.served_name:
        return BASE
    if name in endpoint.adapters:
        return name
    base, sep, adapter = name.rpartition(":")
    if sep and base == endpoint.served_name and adapter in endpoint.adapters:
        return adapter
    raise _unknown(endpoint, f"the model {name!r} does not exist on this endpoint", "model")


def _native_adapter(endpoint: Endpoint, lora_path: Any) -> str:
    if lora_path is None:
        return BASE
    if isinstance(lora_path, str) and lora_path in endpoint.adapters:
        return lora_path
    raise _unknown(endpoint, f"the adapter {lora_path!r} is not served here", "lora_path")


def _unknown(endpoint: Endpoint, what: str, param: str) -> GatewayError:
    served = ", ".join([endpoint.served_name, *sorted(endpoint.adapters)])
    return GatewayError(404, f"{what}; it serves: {served}", code="model_not_found", param=param)


def _check_scope(key: InferenceKey, adapter: str, param: str) -> None:
    if key.allows_adapter(adapter):
        return
    allowed = ", ".join(sorted(key.allowed_adapters))
    called = f"the adapter {adapter!r}" if adapter else "the base model"
    raise GatewayError(
        403,
        f"this API key may not call {called}; it may call: {allowed}",
        code="model_not_allowed",
        param=param,
    )


def _renamed(prepared: Prepared, payload: dict[str, Any], model: str) -> Prepared:
    """The request with ``model`` in SGLang's form; a stream keeps the usage option the gateway
    asked for (``gateway.inbound.prepare`` may have spliced it into the bytes only)."""
    upstream = {**payload, "model": model}
    if prepared.strip_usage_chunk:
        options = payload.get("stream_options")
        upstream["stream_options"] = {**(options or {}), "include_usage": True}
    return Prepared(
        body=orjson.dumps(upstream),
        stream=prepared.stream,
        strip_usage_chunk=prepared.strip_usage_chunk,
        payload=payload,
    )


def models_list(endpoint: Endpoint, key: InferenceKey) -> bytes:
    """``GET /v1/models`` on an endpoint with adapters, answered from the route table: the base
    model and its adapters (``parent`` the base, as SGLang lists loaded ones), those the key may
    call. smg 1.13's own list names the base model only."""
    created = int(time.time())
    data = []
    if key.allows_adapter(BASE):
        data.append(_model(endpoint.served_name, None, created))
    for adapter in sorted(endpoint.adapters):
        if key.allows_adapter(adapter):
            data.append(_model(adapter, endpoint.served_name, created))
    return orjson.dumps({"object": "list", "data": data})


def _model(name: str, parent: str | None, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "plinth",
            "root": name, "parent": parent}  # fmt: skip
