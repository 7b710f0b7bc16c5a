"""LoRA adapters in the simulator (issue 30 item 1): a step costs more the more distinct adapters
it holds, max_loras_per_batch holds back a request whose adapter has no slot, the GPU pool evicts
by its policy, and an engine process started with SGLang's LoRA flags loads, lists, serves and
unloads adapters through SGLang's API, each adapter answering differently."""

from __future__ import annotations

import httpx

from runtime.perf.hardware import DEFAULT_MODEL, H100_SXM
from runtime.perf.lora import lora_cost
from runtime.perf.step import EngineShape, StepModel, StepWork
from runtime.sim.kvpool import KvPool
from runtime.sim.lora import AdapterPool, LoraConfig
from runtime.sim.radix import RadixCache
from runtime.sim.request import GenerationParams, SimRequest
from runtime.sim.sampling import TokenSource, request_key
from runtime.sim.scheduler import Scheduler, SchedulerConfig
from runtime.sim.tokenizer import Tokenizer
from tests.runtime.sim.conftest import EngineFactory

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")


def pool(slots: int, policy: str = "lru") -> AdapterPool:
    config = LoraConfig(slots, None, rank=16, modules=MODULES, eviction_policy=policy)
    adapters = AdapterPool(config, DEFAULT_MODEL, shards=1)
    for name in ("a", "b", "c"):
        adapters.register(name, f"org/{name}", pinned=False)
    return adapters


def request(rid: str, adapter: str | None) -> SimRequest:
    prompt = [7, 8, 9, int(rid)]
    source = TokenSource(request_key(0, prompt), 10_000, 0.0, prompt, adapter=adapter)
    return SimRequest(rid, prompt, GenerationParams(max_new_tokens=4), source, adapter=adapter)


def test_a_step_costs_more_with_each_distinct_adapter_in_it() -> None:
    cost = lora_cost(DEFAULT_MODEL, MODULES, rank=16, shards=1)
    step = StepModel(H100_SXM, DEFAULT_MODEL, EngineShape(lora=cost))

    def decode(adapters: int) -> float:
        work = StepWork(decode_seqs=32, decode_tokens=32, decode_context=32 * 1000,
                        lora_adapters=adapters)  # fmt: skip
        return step.step_seconds(work)

    base = StepModel(H100_SXM, DEFAULT_MODEL, EngineShape()).step_seconds(
        StepWork(decode_seqs=32, decode_tokens=32, decode_context=32 * 1000)
    )
    assert decode(0) == base  # the base model's requests run no adapter
    assert base < decode(1) < decode(4) < decode(8)


def test_a_request_whose_adapter_has_no_slot_waits_for_the_batch() -> None:
    # Two slots: the base model's requests hold one, as in SGLang's memory pool.
    sched = Scheduler(SchedulerConfig(max_running_requests=8), KvPool(10_000, RadixCache()),
                      Tokenizer(), lora=pool(slots=2))  # fmt: skip
    reqs = [request("1", None), request("2", "a"), request("3", "b"), request("4", "a")]
    for req in reqs:
        sched.add(req)
    first = sched.plan()
    assert [r.rid for r, _ in first.prefill] == ["1", "2", "4"]
    assert [r.rid for r in sched.waiting] == ["3"]
    sched.commit(first, now=1.0)
    for step_number in range(2, 50):
        if not sched.has_work():
            break
        sched.commit(sched.plan(), now=float(step_number))
    assert all(r.finished is not None and r.finished.kind != "abort" for r in reqs)
    assert reqs[2].admitted_at is not None and reqs[2].admitted_at > 1.0


def test_an_adapter_finds_only_its_own_prefixes_in_the_cache() -> None:
    sched = Scheduler(SchedulerConfig(max_running_requests=8), KvPool(10_000, RadixCache()),
                      Tokenizer(), lora=pool(slots=4))  # fmt: skip

    def run(req: SimRequest) -> int:
        sched.add(req)
        for step_number in range(50):
            if not sched.has_work():
                break
            sched.commit(sched.plan(), now=float(step_number))
        return req.cached_tokens or 0

    assert run(request("1", None)) == 0
    # The same prompt under an adapter: its KV differs (SGLang keys the tree by LoRA id).
    assert run(request("1", "a")) == 0
    assert run(request("1", "a")) == 3  # its own prefix, all but the last prompt token
    assert run(request("1", None)) == 3


def test_the_gpu_pool_evicts_by_its_policy_and_copies_what_it_takes_in() -> None:
    lru, fifo = pool(slots=2, policy="lru"), pool(slots=2, policy="fifo")
    for adapters in (lru, fifo):
        assert adapters.prepare({"a"}) == adapters.adapter_bytes
        adapters.prepare({"b"})
        assert adapters.prepare({"a"}) == 0.0  # still in its slot: nothing copied
        adapters.prepare({"c"})
    # lru: a was used after b, so b goes; fifo: a came first, so a goes.
    assert list(lru.slots) == ["a", "c"] and lru.evictions == 1
    assert list(fifo.slots) == ["b", "c"] and fifo.evictions == 1


def _chat(client: httpx.Client, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Summarise the plan."}],
            "max_tokens": 12, "temperature": 0}  # fmt: skip
    return client.post("/v1/chat/completions", json=body)


def test_an_engine_loads_lists_serves_and_unloads_adapters(
    start_sim_engine: EngineFactory,
) -> None:
    flags = [
        "--enable-lora", "--lora-paths", "sql=org/sql-lora", "--max-lora-rank", "16",
        "--lora-target-modules", "all", "--max-loras-per-batch", "2", "--max-loaded-loras", "2",
    ]  # fmt: skip
    engine = start_sim_engine(args=flags)
    with httpx.Client(base_url=engine.url, timeout=30) as client:
        base = client.get("/v1/models").json()["data"][0]["id"]
        loaded = client.post(
            "/load_lora_adapter", json={"lora_name": "ocr", "lora_path": "org/ocr"}
        )
        assert loaded.status_code == 200, loaded.text
        assert loaded.json()["loaded_adapters"] == {"sql": "org/sql-lora", "ocr": "org/ocr"}
        cards = {c["id"]: c["parent"] for c in client.get("/v1/models").json()["data"]}
        assert cards == {base: None, "sql": base, "ocr": base}
        full = client.post("/load_lora_adapter", json={"lora_name": "x", "lora_path": "org/x"})
        assert full.status_code == 400
        assert "Maximum number of loaded LoRA adapters is 2" in full.json()["error_message"]

        texts = {}
        for model in (base, f"{base}:sql", f"{base}:ocr"):
            answer = _chat(client, model)
            assert answer.status_code == 200, answer.text
            texts[model] = answer.json()["choices"][0]["message"]["content"]
        assert len(set(texts.values())) == 3  # greedy, same prompt: each adapter its own text
        native = client.post("/generate", json={
            "text": "Summarise the plan.", "lora_path": "sql",
            "sampling_params": {"max_new_tokens": 4, "temperature": 0}})  # fmt: skip
        assert native.status_code == 200, native.text
        # Three models one after another through two slots: an adapter is evicted (adapters go
        # before the base model's slot).
        pool_state = client.get("/server_info").json()["sim_lora"]
        assert pool_state["evictions"] >= 1 and len(pool_state["slots"]) == 2
        loads = client.get("/v1/loads", params={"include": "lora"}).json()["loads"][0]
        assert loads["lora"]["slots_total"] == 2

        gone = client.post("/unload_lora_adapter", json={"lora_name": "ocr"})
        assert gone.status_code == 200 and "ocr" not in gone.json()["loaded_adapters"]
        refused = _chat(client, f"{base}:ocr")
        assert refused.status_code == 400 and "not loaded: ocr" in refused.json()["message"]
        assert [c["id"] for c in client.get("/v1/models").json()["data"]] == [base, "sql"]
