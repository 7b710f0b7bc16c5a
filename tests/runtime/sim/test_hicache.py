"""HiCache in the simulator (issue 29 item 2): a prefix the GPU evicted is loaded back from the
host tier (or prefetched from storage) instead of recomputed, at the host link's bandwidth;
write-back pays at eviction and write-through in the background; /metrics and /v1/loads say
which tier served each cached token; an engine process started with SGLang's flags serves it."""

from __future__ import annotations

import httpx
import pytest

from runtime.perf.hardware import DEFAULT_MODEL, H100_SXM
from runtime.perf.kv_tiers import TierLinks, TierTraffic, step_seconds, tier_links
from runtime.sim.args import StartupError, check_engine_args, parse_engine_args
from runtime.sim.engine import Engine
from runtime.sim.hicache import HiCache, HiCacheConfig
from runtime.sim.kvpool import KvPool
from runtime.sim.memory import plan_memory
from runtime.sim.radix import RadixCache
from runtime.sim.request import GenerationParams, SimRequest
from runtime.sim.sampling import TokenSource, request_key
from runtime.sim.scheduler import Scheduler, SchedulerConfig
from runtime.sim.tokenizer import Tokenizer
from tests.runtime.sim.conftest import EngineFactory

POOL = 1_000  # GPU KV pool, tokens: three 400-token documents do not fit at once
DOC = 400


def request(rid: str, prompt: list[int]) -> SimRequest:
    source = TokenSource(request_key(0, prompt), output_len_mean=10_000, noise=0.0,
                         prompt_ids=prompt)  # fmt: skip
    return SimRequest(rid, prompt, GenerationParams(max_new_tokens=2), source)


def run(scheduler: Scheduler, req: SimRequest) -> SimRequest:
    scheduler.add(req)
    for step_number in range(1000):
        if not scheduler.has_work():
            break
        step = scheduler.plan()
        scheduler.commit(step, now=float(step_number))
    return req


def scheduler(policy: str = "write_through", storage: bool = False, host: int = 4 * POOL):
    hicache = HiCache(HiCacheConfig(host, policy, storage, kv_bytes_per_token=1000.0))
    pool = KvPool(POOL, RadixCache())
    config = SchedulerConfig(max_running_requests=8)
    return Scheduler(config, pool, Tokenizer(), hicache), hicache


def documents(count: int) -> list[list[int]]:
    return [list(range(10_000 * (i + 1), 10_000 * (i + 1) + DOC)) for i in range(count)]


@pytest.mark.parametrize("policy", ["write_through", "write_back"])
def test_an_evicted_prefix_comes_back_from_the_host_tier_not_recomputed(policy: str) -> None:
    sched, hicache = scheduler(policy)
    docs = documents(3)
    for i, doc in enumerate(docs):  # the third evicts the first from the GPU
        run(sched, request(f"d{i}", doc))
    hicache.take_traffic()
    again = run(sched, request("again", [*docs[0], 1, 2, 3]))
    assert again.cached_tokens == DOC
    assert (again.cached_host, again.cached_storage) == (DOC, 0)
    assert hicache.stats.load_back_tokens == DOC
    assert hicache.take_traffic().host_load == DOC * 1000.0


def test_without_hicache_the_evicted_prefix_is_recomputed() -> None:
    sched = Scheduler(SchedulerConfig(max_running_requests=8), KvPool(POOL, RadixCache()),
                      Tokenizer())  # fmt: skip
    docs = documents(3)
    for i, doc in enumerate(docs):
        run(sched, request(f"d{i}", doc))
    assert run(sched, request("again", [*docs[0], 1, 2, 3])).cached_tokens == 0


def test_write_back_pays_at_eviction_and_write_through_as_it_caches() -> None:
    back, back_cache = scheduler("write_back")
    through, through_cache = scheduler("write_through")
    docs = documents(3)
    for i, doc in enumerate(docs[:2]):
        run(back, request(f"d{i}", doc))
        run(through, request(f"d{i}", doc))
    assert back_cache.stats.traffic.write_back == 0 and back_cache.stats.traffic.write_through == 0
    assert through_cache.stats.traffic.write_through > 0
    run(back, request("d2", docs[2]))  # evicts: now write-back copies, and waits for it
    assert back_cache.stats.traffic.write_back > 0


def test_a_host_tier_overflow_is_served_by_storage() -> None:
    sched, hicache = scheduler("write_through", storage=True, host=2 * POOL // 2)
    docs = documents(6)
    for i, doc in enumerate(docs):
        run(sched, request(f"d{i}", doc))
    again = run(sched, request("again", [*docs[0], 9]))
    assert again.cached_storage == DOC and again.cached_host == 0
    assert hicache.stats.prefetched_tokens == DOC


def test_loads_overlap_compute_and_write_back_and_storage_do_not() -> None:
    links = TierLinks(host_gbs=10.0, storage_gbs=1.0)
    compute = 0.01
    # 50 MB from host over 10 GB/s: 5 ms, hidden under a 10 ms step.
    assert step_seconds(compute, TierTraffic(host_load=50e6), links) == compute
    assert step_seconds(compute, TierTraffic(host_load=200e6), links) == pytest.approx(0.02)
    assert step_seconds(compute, TierTraffic(write_back=50e6), links) == pytest.approx(0.015)
    assert step_seconds(compute, TierTraffic(storage_load=10e6), links) == pytest.approx(0.02)


def test_the_host_link_comes_from_the_gpu_catalogue() -> None:
    from runtime.catalog import get_gpu
    from runtime.perf.hardware import gpu_shape

    h100, gb200 = gpu_shape(get_gpu("H100-SXM")), gpu_shape(get_gpu("GB200"))
    assert h100.host_link_gbs == 64 and gb200.host_link_gbs == 450  # PCIe Gen5 / NVLink-C2C
    assert tier_links(gb200).host_gbs > 5 * tier_links(h100).host_gbs


def args_for(*flags: str):  # type: ignore[no-untyped-def]
    return parse_engine_args(["--model-path", "sim/x", *flags], env={}, warn=lambda _: None)


def test_the_engine_sizes_its_host_tier_as_sglang_does() -> None:
    plain = plan_memory(args_for(), H100_SXM, DEFAULT_MODEL)
    ratio = plan_memory(args_for("--enable-hierarchical-cache", "--hicache-ratio", "3"),
                        H100_SXM, DEFAULT_MODEL)  # fmt: skip
    assert plain.host_tokens == 0
    assert ratio.host_tokens == 3 * ratio.max_total_num_tokens
    sized = plan_memory(args_for("--enable-hicache", "--hicache-size", "100"), H100_SXM,
                        DEFAULT_MODEL)  # fmt: skip
    assert sized.host_tokens == int(100e9 // sized.kv_bytes_per_token)
    with pytest.raises(StartupError, match="larger than the device"):
        plan_memory(args_for("--enable-hicache", "--hicache-size", "1"), H100_SXM, DEFAULT_MODEL)
    with pytest.raises(StartupError, match="needs --enable-hierarchical-cache"):
        check_engine_args(args_for("--hicache-storage-backend", "file"))


def test_metrics_count_cached_tokens_by_tier_under_sglangs_names() -> None:
    args = args_for("--enable-hierarchical-cache", "--max-total-tokens", str(POOL))
    engine = Engine(args, H100_SXM, DEFAULT_MODEL, plan_memory(args, H100_SXM, DEFAULT_MODEL))
    docs = documents(3)
    for i, doc in enumerate(docs):
        run(engine.scheduler, request(f"d{i}", doc))
    again = run(engine.scheduler, request("again", [*docs[0], 5]))
    engine.record_finished(again)
    engine.refresh_metrics()
    registry, labels = engine.metrics.registry, engine.metrics.request_labels
    host = registry.get_sample_value(
        "sglang:cached_tokens_total", {**labels, "cache_source": "host"}
    )
    assert host == DOC
    sched_labels = engine.metrics.scheduler_labels
    assert (
        registry.get_sample_value("sglang:load_back_tokens_total", {**sched_labels, "pool": "host"})
        == DOC
    )
    assert registry.get_sample_value("sglang:hicache_host_total_tokens", sched_labels) == 2 * POOL
    section = engine.loads({"memory"})["memory"]["hicache"]
    assert section["cached_tokens"]["host"] == DOC and section["enabled"] is True


def test_an_engine_process_with_hicache_flags_reports_its_tiers(
    start_sim_engine: EngineFactory,
) -> None:
    proc = start_sim_engine(
        args=["--enable-hierarchical-cache", "--hicache-ratio", "2",
              "--hicache-write-policy", "write_back", "--hicache-storage-backend", "file"],
    )  # fmt: skip
    with httpx.Client(base_url=proc.url, timeout=30) as client:
        prompt = "tiers " * 200
        for _ in range(2):
            body = {"text": prompt, "sampling_params": {"max_new_tokens": 2}}
            assert client.post("/generate", json=body).status_code == 200
        loads = client.get("/v1/loads", params={"include": "memory"}).json()
        metrics = client.get("/metrics").text
    section = loads["loads"][0]["memory"]["hicache"]
    assert section["enabled"] is True and section["host_total_tokens"] > 0
    assert "sglang:hicache_host_total_tokens{" in metrics


def test_the_probe_reads_each_tiers_share_of_the_prompt_tokens() -> None:
    """The probe's parse of a HiCache engine's /metrics keeps cached tokens per cache_source,
    and the per-tier shares it stores add up to the hit rate; an engine without the tiers gets
    none (issue 29: the console's per-tier lines come from these)."""
    from deployments.traffic.probe import tier_hit_rates
    from runtime.metrics import parse_metrics

    args = args_for("--enable-hierarchical-cache", "--max-total-tokens", str(POOL))
    engine = Engine(args, H100_SXM, DEFAULT_MODEL, plan_memory(args, H100_SXM, DEFAULT_MODEL))
    docs = documents(3)
    for i, doc in enumerate(docs):
        engine.record_finished(run(engine.scheduler, request(f"d{i}", doc)))
    engine.record_finished(run(engine.scheduler, request("again", [*docs[0], 5])))
    snapshot = parse_metrics(engine.metrics.render().decode())
    prompt = snapshot.counter("sglang:prompt_tokens_total")
    tiers = tier_hit_rates(snapshot, prompt)
    assert tiers["host"] == pytest.approx(DOC / prompt) and tiers["storage"] == 0.0
    assert sum(tiers.values()) == pytest.approx(
        snapshot.counter("sglang:cached_tokens_total") / prompt
    )
    plain = _plain_engine_snapshot()
    assert tier_hit_rates(plain, plain.counter("sglang:prompt_tokens_total")) == {}


def _plain_engine_snapshot():  # type: ignore[no-untyped-def]
    from runtime.metrics import parse_metrics

    args = args_for()
    engine = Engine(args, H100_SXM, DEFAULT_MODEL, plan_memory(args, H100_SXM, DEFAULT_MODEL))
    engine.record_finished(run(engine.scheduler, request("one", documents(1)[0])))
    return parse_metrics(engine.metrics.render().decode())


def test_a_storage_read_holds_its_request_in_the_queue_not_the_others() -> None:
    """Pages coming from storage keep only the request that needs them waiting (SGLang's
    prefetch runs beside the GPU): a fresh request behind it is admitted at once, and it follows
    once the read is done, as a storage hit."""
    sched, hicache = scheduler("write_through", storage=True, host=2 * POOL // 2)
    hicache.storage_seconds = lambda nbytes: 5.0
    docs = documents(6)
    for i, doc in enumerate(docs):
        run(sched, request(f"d{i}", doc))
    waiting, fresh = request("waiting", [*docs[0], 9]), request("fresh", list(range(7, 107)))
    sched.add(waiting)
    sched.add(fresh)
    sched.now = 100.0
    step = sched.plan()
    assert [r.rid for r, _ in step.prefill] == ["fresh"]
    assert sched.prefetch_due == 105.0
    sched.commit(step, now=100.0)
    sched.now = 105.0
    assert "waiting" in [r.rid for r, _ in sched.plan().prefill]
    assert waiting.cached_storage == DOC and waiting.cached_host == 0
