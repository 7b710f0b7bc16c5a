"""LoRA adapters end to end (issue 30 item 1): the local driver runs a simulated engine and smg
as real processes, a real gateway process is in front, and reconcile runs in the test's process.

An endpoint serves two adapters: keys scoped to one adapter each call only theirs (403 naming
``model`` for the other), an unknown model is a 404 naming ``model``, the answers differ per
adapter, ``/v1/models`` lists the base and its adapters, and usage is flushed per adapter. An
adapter added to the running endpoint is a new revision loaded live: the same engine process
serves it. One the engine refuses (an adapter of that name was loaded on it by hand) leaves the
revision failed with the engine's reason and the serving revision serving.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane import services as platform
from controlplane.crypto import engine_api_key
from deployments.drivers.local.processes import ProcessTable
from deployments.endpoints import adapters, services
from deployments.endpoints.models import Deployment
from deployments.status import ACTIVE
from deployments.traffic.models import UsageRecord
from deployments.traffic.usage import flush_usage
from runtime.client import EngineClient
from tests.conftest import Cast
from tests.fixtures.endpoints import converge, small_spec
from tests.gateway.conftest import GatewayProcess, redis_client, start_gateway, stop_process
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
PROMPT = [{"role": "user", "content": "write a limerick about invoices"}]


def lora_spec() -> dict[str, Any]:
    """Two adapters, and a pool sized for more (rank and modules set): adapters added later
    fit the running engines, so they are loaded without a restart."""
    adapters_ = [
        {"name": "legal", "source": "acme/legal-lora", "rank": 8},
        {"name": "sql", "source": "acme/sql-lora", "rank": 8},
    ]
    lora = {"adapters": adapters_, "max_lora_rank": 16, "target_modules": ["q_proj", "v_proj"]}
    return {**small_spec(), "lora": lora}


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    proc = start_gateway(tmp_path, GATEWAY_REFRESH_SECONDS="30")
    yield proc
    stop_process(proc.popen)


def chat(client: httpx.Client, url: str, key: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": PROMPT, "max_tokens": 12, "temperature": 0}
    headers = {"Authorization": f"Bearer {key}"}
    return client.post(f"{url}/chat/completions", json=body, headers=headers, timeout=60)


def engine_pids(run_dir: Path, deployment: Deployment) -> set[int]:
    records = ProcessTable(run_dir / str(deployment.pk)).records()
    return {r.pid for r in records if r.role == "engine"}


def test_an_endpoint_serves_adapters_to_scoped_keys_and_adds_one_live(
    cast: Cast, fast_local: Path, gateway: GatewayProcess
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    deployment = services.create_deployment(actor, slug="tuned", name="Tuned", spec=lora_spec())
    deployment = converge(deployment, lambda d: d.status == ACTIVE, "the endpoint active")
    pids = engine_pids(fast_local, deployment)
    assert len(pids) == 1

    def key(*names: str) -> str:
        made = platform.create_api_key(
            actor, name=f"key {names}", kind="inference", allowed_adapters=list(names)
        )
        return made.plaintext

    legal_key, sql_key, any_key = key("legal"), key("sql"), key()
    url = gateway.base_url("tuned")
    with httpx.Client() as client:
        wait_until(lambda: chat(client, url, any_key, "legal").status_code == 200, "routable", 30)
        texts = {}
        for model, used in (("legal", legal_key), ("sql", sql_key), ("chat", any_key)):
            answer = chat(client, url, used, model)
            assert answer.status_code == 200, answer.text
            texts[model] = answer.json()["choices"][0]["message"]["content"]
        assert len(set(texts.values())) == 3, f"the same answer for two models: {texts}"
        # SGLang's own form names the same adapter, and answers as it.
        same = chat(client, url, sql_key, "chat:sql").json()["choices"][0]["message"]["content"]
        assert same == texts["sql"]

        refused = chat(client, url, legal_key, "sql")
        assert refused.status_code == 403 and refused.json()["error"]["param"] == "model"
        assert chat(client, url, legal_key, "chat").status_code == 403  # not the base either
        unknown = chat(client, url, any_key, "nope")
        assert unknown.status_code == 404
        assert unknown.json()["error"] | {"message": ""} == {
            "message": "", "type": "invalid_request_error", "param": "model",
            "code": "model_not_found",
        }  # fmt: skip
        listed = client.get(f"{url}/models", headers={"Authorization": f"Bearer {any_key}"})
        models = {m["id"]: m["parent"] for m in listed.json()["data"]}
        assert models == {"chat": None, "legal": "chat", "sql": "chat"}

    def flushed() -> dict[str, int]:
        flush_usage(include_current=True, client=redis_client())
        rows = UsageRecord.objects.filter(deployment_id=deployment.pk)
        return {r.adapter: r.requests for r in rows}

    wait_until(lambda: flushed() == {"legal": 1, "sql": 2, "": 1}, "usage per adapter", 15)

    # --- an adapter added to the running endpoint: a revision, loaded live -------------------
    revision = adapters.add_adapter(
        actor, deployment.pk, {"name": "code", "source": "acme/code-lora", "rank": 16}
    )
    deployment = converge(
        deployment,
        lambda d: d.current_revision == revision and d.status == ACTIVE,
        "the new revision serving",
    )
    assert engine_pids(fast_local, deployment) == pids, "the engine was restarted"
    assert deployment.events.filter(reason="AdaptersApplied", revision_number=revision.number)
    with httpx.Client() as client:
        wait_until(lambda: chat(client, url, any_key, "code").status_code == 200, "code", 30)

    # --- an adapter the engine refuses: the revision fails to apply, the old one serves -------
    [engine] = [r for r in ProcessTable(fast_local / str(deployment.pk)).records()
                if r.role == "engine"]  # fmt: skip
    with EngineClient(engine.url, api_key=engine_api_key(str(deployment.pk))) as direct:
        assert direct.load_lora_adapter("ops", "acme/ops-lora") == ""  # loaded outside Plinth
    refused_revision = adapters.add_adapter(
        actor, deployment.pk, {"name": "ops", "source": "acme/other-ops-lora", "rank": 8}
    )
    deployment = converge(
        deployment,
        lambda d: d.events.filter(reason="RolloutFailed", revision_number=refused_revision.number),
        "the refused revision recorded",
    )
    assert deployment.current_revision == revision
    assert deployment.status == ACTIVE
    assert "already loaded" in deployment.failure_reason
    assert engine_pids(fast_local, deployment) == pids
