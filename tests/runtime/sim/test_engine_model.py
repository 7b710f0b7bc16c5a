"""The engine model without processes: tokenizer, prefix cache, scheduler, roofline, flags."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime.perf.hardware import DEFAULT_MODEL, H100_SXM, ModelShape, lookup_model, resolve_gpu
from runtime.perf.spec import chain_rate
from runtime.perf.step import EngineShape, StepModel
from runtime.sim.args import StartupError, check_engine_args, parse_engine_args
from runtime.sim.engine import Engine
from runtime.sim.kvpool import KvPool
from runtime.sim.memory import plan_memory
from runtime.sim.radix import RadixCache
from runtime.sim.request import GenerationParams, SimRequest
from runtime.sim.roofline import Roofline, StepWork
from runtime.sim.sampling import TokenSource, request_key, teacher_forced_logprobs
from runtime.sim.scheduler import Scheduler, SchedulerConfig
from runtime.sim.tokenizer import Tokenizer, output_word_id


def args_for(*flags: str):  # type: ignore[no-untyped-def]
    return parse_engine_args(["--model-path", "sim/x", *flags], env={}, warn=lambda _: None)


def make_request(rid: str, prompt: list[int], max_new: int = 4, seed: int = 0) -> SimRequest:
    source = TokenSource(
        request_key(seed, prompt), output_len_mean=10_000, noise=0.0, prompt_ids=prompt
    )
    return SimRequest(rid, prompt, GenerationParams(max_new_tokens=max_new), source)


def run_to_completion(scheduler: Scheduler, limit: int = 1000) -> int:
    steps = 0
    while scheduler.has_work() and steps < limit:
        step = scheduler.plan()
        if step.work.empty:
            scheduler.unstick()
        scheduler.commit(step, now=float(steps))
        steps += 1
    return steps


def test_text_generated_by_the_engine_tokenizes_back_to_the_same_ids() -> None:
    tokenizer = Tokenizer()
    ids = [output_word_id(i * 7) for i in range(50)]
    assert tokenizer.encode(tokenizer.decode(ids)) == ids


def test_equal_text_prefixes_give_equal_token_prefixes() -> None:
    tokenizer = Tokenizer()
    shared = "You are a careful assistant for the billing team. " * 20
    a, b = tokenizer.encode(shared + "Why?"), tokenizer.encode(shared + "How much?")
    # As with BPE, the boundary token may differ (here the trailing space joins the next word).
    common = len(tokenizer.encode(shared)) - 1
    assert a[:common] == b[:common]


def test_radix_cache_matches_the_longest_cached_prefix() -> None:
    cache = RadixCache()
    cache.insert([1, 2, 3, 4, 5])
    cache.insert([1, 2, 9])
    assert cache.match_prefix([1, 2, 3, 4, 5, 6]).length == 5
    assert cache.match_prefix([1, 2, 9, 9]).length == 3
    assert cache.match_prefix([7]).length == 0
    assert cache.total_size == 6


def test_radix_cache_evicts_least_recently_used_unlocked_leaves() -> None:
    cache = RadixCache()
    cache.insert([1, 2, 3])
    cache.insert([4, 5, 6])
    locked = cache.match_prefix([4, 5, 6]).node
    cache.lock(locked)
    cache.match_prefix([1, 2, 3])  # touched last, but [4,5,6] is locked
    assert cache.evict(10) == 3
    assert cache.match_prefix([4, 5, 6]).length == 3
    cache.unlock(locked)
    assert cache.evictable_size == 3


def test_page_size_rounds_matches_down_to_whole_pages() -> None:
    cache = RadixCache(page_size=4)
    cache.insert(list(range(10)))
    assert cache.total_size == 8
    assert cache.match_prefix(list(range(10))).length == 8


def test_a_second_request_with_the_same_prefix_hits_the_cache() -> None:
    scheduler = Scheduler(
        SchedulerConfig(max_running_requests=8), KvPool(10_000, RadixCache()), Tokenizer()
    )
    first = make_request("a", list(range(100, 400)))
    scheduler.add(first)
    run_to_completion(scheduler)
    second = make_request("b", [*range(100, 400), 7, 8])
    scheduler.add(second)
    run_to_completion(scheduler)
    assert first.cached_tokens == 0
    assert second.cached_tokens == 300
    assert second.finished is not None and second.finished.kind == "length"


def test_long_prompts_are_prefilled_in_chunks() -> None:
    config = SchedulerConfig(max_running_requests=8, chunked_prefill_size=256)
    scheduler = Scheduler(config, KvPool(10_000, RadixCache()), Tokenizer())
    scheduler.add(make_request("long", list(range(1000, 2000))))
    chunks: list[int] = []
    while scheduler.has_work():
        step = scheduler.plan()
        chunks.extend(take for _, take in step.prefill)
        scheduler.commit(step, now=0.0)
    assert chunks == [256, 256, 256, 232]


def test_running_requests_are_capped_and_the_rest_wait() -> None:
    config = SchedulerConfig(max_running_requests=2)
    scheduler = Scheduler(config, KvPool(10_000, RadixCache()), Tokenizer())
    for i in range(5):
        scheduler.add(make_request(f"r{i}", [i * 1000 + j for j in range(50)], max_new=20))
    scheduler.commit(scheduler.plan(), now=0.0)
    assert scheduler.num_running == 2
    assert len(scheduler.waiting) == 3


def test_kv_pressure_retracts_a_request_which_still_completes() -> None:
    # A low conservativeness admits optimistically, so decoding outgrows the pool.
    config = SchedulerConfig(max_running_requests=8, conservativeness=0.1)
    scheduler = Scheduler(config, KvPool(700, RadixCache()), Tokenizer())
    requests = [
        make_request(f"r{i}", [i * 1000 + j for j in range(200)], max_new=150) for i in range(3)
    ]
    for req in requests:
        scheduler.add(req)
    run_to_completion(scheduler)
    assert scheduler.stats.retracted_requests_total >= 1
    assert all(r.finished is not None and r.finished.kind == "length" for r in requests)
    assert all(r.completion_tokens == 150 for r in requests)


def test_outputs_are_deterministic_for_a_seed_and_prompt() -> None:
    def generate(seed: int) -> list[int]:
        scheduler = Scheduler(
            SchedulerConfig(max_running_requests=4), KvPool(5000, RadixCache()), Tokenizer()
        )
        req = make_request("x", [5, 6, 7], max_new=12, seed=seed)
        scheduler.add(req)
        run_to_completion(scheduler)
        return req.output_ids

    assert generate(1) == generate(1)
    assert generate(1) != generate(2)


def test_quantization_perturbs_logprobs_not_the_candidates() -> None:
    prompt = [1, 2, 3]
    key = request_key(0, prompt)
    exact = TokenSource(key, 100, 0.0, prompt, temperature=0.0)
    quantized = TokenSource(key, 100, 0.03, prompt, temperature=0.0)
    token = exact.token_at(0, finishing=False)
    _, a = exact.top_logprobs(0, token, 20)
    _, b = quantized.top_logprobs(0, token, 20)
    assert {t.token_id for t in a} == {t.token_id for t in b}
    by_id = {t.token_id: t.logprob for t in b}
    drift = max(abs(x.logprob - by_id[x.token_id]) for x in a)
    assert 0 < drift < 0.5


def _generated(source: TokenSource, count: int) -> list[int]:
    return [source.token_at(i, finishing=False) for i in range(count)]


@pytest.mark.parametrize("noise", [0.0, 0.06, 0.6])
def test_greedy_tokens_are_the_top_of_their_own_distribution(noise: float) -> None:
    prompt = [7, 8, 9, 10]
    source = TokenSource(request_key(3, prompt), 100, noise, prompt, temperature=0.0)
    for position, token in enumerate(_generated(source, 40)):
        own, tops = source.top_logprobs(position, token, 5)
        assert tops[0].token_id == token and own == tops[0].logprob
        assert tops == sorted(tops, key=lambda t: -t.logprob)


def test_greedy_ignores_the_seed_and_sampling_follows_it() -> None:
    prompt = [7, 8, 9, 10]

    def tokens(seed: int, temperature: float) -> list[int]:
        source = TokenSource(request_key(seed, prompt), 100, 0.0, prompt, temperature)
        return _generated(source, 30)

    assert tokens(1, 0.0) == tokens(2, 0.0)
    assert tokens(1, 1.0) == tokens(1, 1.0) != tokens(2, 1.0)
    assert tokens(1, 1.0) != tokens(1, 0.0)


@pytest.mark.parametrize(("noise", "temperature"), [(0.0, 0.0), (0.06, 0.0), (0.6, 1.0)])
def test_generated_logprobs_equal_teacher_forced_input_logprobs(
    noise: float, temperature: float
) -> None:
    """SGLang's identity: an output token scores as the same token fed back in the prompt."""
    prompt = [21, 22, 23, 24, 25]
    source = TokenSource(request_key(0, prompt), 100, noise, prompt, temperature)
    output = _generated(source, 25)
    start = len(prompt) - 1
    rows = teacher_forced_logprobs(prompt + output, start, noise, top=5)
    for position, token in enumerate(output):
        row = rows[len(prompt) + position - start]
        assert row is not None
        assert source.top_logprobs(position, token, 5) == row


def test_a_recomputed_position_keeps_its_token() -> None:
    prompt = [4, 5]
    source = TokenSource(request_key(0, prompt), 100, 0.0, prompt)
    first = _generated(source, 5)
    assert [source.token_at(i, finishing=False) for i in range(5)] == first
    with pytest.raises(ValueError):
        source.token_at(7, finishing=False)


def test_decode_is_bandwidth_bound_and_prefill_compute_bound() -> None:
    bf16 = Roofline(args_for(), H100_SXM, DEFAULT_MODEL)
    fp8 = Roofline(args_for("--quantization", "fp8"), H100_SXM, DEFAULT_MODEL)
    tp2 = Roofline(args_for("--tp-size", "2"), H100_SXM, DEFAULT_MODEL)
    one = StepWork(decode_seqs=1, decode_tokens=1, decode_context=1000)
    many = StepWork(decode_seqs=32, decode_tokens=32, decode_context=32_000)
    prefill = StepWork(prefill_tokens=8000, prefill_pairs=8000 * 4000)
    assert bf16.step_seconds(many) < 2 * bf16.step_seconds(one)  # batching is nearly free
    assert fp8.step_seconds(one) < 0.7 * bf16.step_seconds(one)  # half the weight bytes
    assert tp2.step_seconds(prefill) < 0.7 * bf16.step_seconds(prefill)
    assert bf16.step_seconds(prefill) > 10 * bf16.step_seconds(one)


def test_the_kv_pool_is_sized_from_gpu_memory_and_model() -> None:
    bf16 = plan_memory(args_for("--mem-fraction-static", "0.85"), H100_SXM, DEFAULT_MODEL)
    fp8_kv = plan_memory(
        args_for("--mem-fraction-static", "0.85", "--kv-cache-dtype", "fp8_e4m3"),
        H100_SXM,
        DEFAULT_MODEL,
    )
    assert 300_000 < bf16.max_total_num_tokens < 500_000
    assert fp8_kv.max_total_num_tokens == pytest.approx(2 * bf16.max_total_num_tokens, rel=0.01)
    assert bf16.chunked_prefill_size == 8192


def test_speculation_defaults_max_running_requests_to_48() -> None:
    plan = plan_memory(args_for("--speculative-algorithm", "EAGLE3"), H100_SXM, DEFAULT_MODEL)
    assert plan.max_running_requests == 48


def test_malformed_flag_values_exit_2_like_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    for flags in (
        ["--tp-size", "two"],
        ["--kv-cache-dtype", "fp8"],
        ["--extra-metric-labels", "{"],
    ):
        with pytest.raises(SystemExit) as exc:
            args_for(*flags)
        assert exc.value.code == 2
    assert "invalid choice: 'fp8'" in capsys.readouterr().err


def test_unmodelled_flags_are_ignored_with_one_warning_line() -> None:
    lines: list[str] = []
    args = parse_engine_args(
        [
            "--model-path",
            "m",
            "--trust-remote-code",
            "--torch-compile-max-bs",
            "8",
            "--port",
            "1",
        ],
        env={},
        warn=lines.append,
    )
    assert args.port == 1
    assert len(lines) == 1 and "--trust-remote-code --torch-compile-max-bs" in lines[0]


def test_sim_options_come_from_the_environment_unless_given() -> None:
    env = {"PLINTH_SIM_GPU": "H200", "PLINTH_SIM_TIME_SCALE": "20"}
    args = parse_engine_args(["--model-path", "m", "--time-scale", "5"], env=env, warn=print)
    assert args.sim.gpu == "H200" and args.sim.time_scale == 5


def test_start_up_checks_refuse_what_sglang_refuses() -> None:
    with pytest.raises(StartupError, match="Unknown speculative algorithm"):
        check_engine_args(args_for("--speculative-algorithm", "MAGIC"))
    with pytest.raises(StartupError, match="':'"):
        check_engine_args(args_for("--served-model-name", "a:b"))
    with pytest.raises(StartupError, match="Not enough memory"):
        plan_memory(args_for("--mem-fraction-static", "0.1"), H100_SXM, DEFAULT_MODEL)


def _engine(*flags: str, model: ModelShape = DEFAULT_MODEL) -> Engine:
    args = args_for(*flags)
    return Engine(args, H100_SXM, model, plan_memory(args, H100_SXM, model))


def test_speculation_without_a_shape_uses_sglangs_per_architecture_default() -> None:
    llama = _engine("--speculative-algorithm", "EAGLE3").scheduler.config
    qwen = replace(DEFAULT_MODEL, id="qwen-like", architecture="Qwen3ForCausalLM")
    other = _engine("--speculative-algorithm", "EAGLE3", model=qwen).scheduler.config
    ngram = _engine("--speculative-algorithm", "NGRAM").scheduler.config
    assert (llama.spec_steps, llama.spec_draft_tokens) == (5, 8)
    assert (other.spec_steps, other.spec_draft_tokens) == (3, 4)
    assert ngram.spec_draft_tokens == 12


def test_the_docs_eagle3_launch_decodes_as_runtime_perf_says() -> None:
    """SGLang's docs launch EAGLE-3 on Llama-3.1-8B-Instruct (one H100) with (5, 8, 32) and
    table 2.36x over no speculation (MT-bench). The simulator launched with those flags runs
    runtime/perf's step (its roofline) and draws accept lengths at the chain rate of
    runtime/perf's tree: its batch-1 speedup is runtime/perf's, within 15% of the docs'."""
    flags = ["--speculative-algorithm", "EAGLE3"]
    flags += ["--speculative-draft-model-path", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"]
    flags += ["--speculative-num-steps", "5", "--speculative-eagle-topk", "8"]
    flags += ["--speculative-num-draft-tokens", "32"]
    llama = lookup_model("llama-3.1-8b")
    assert llama is not None
    engine = _engine(*flags, model=llama)
    config, spec = engine.scheduler.config, engine.roofline.engine.spec
    assert spec is not None and spec.draft is not None and spec.draft.id == "eagle3-llama-3.1-8b"
    assert (config.spec_steps, config.spec_draft_tokens) == (5, 32)
    assert config.spec_accept_rate == chain_rate(spec.accept_length, 5)
    verify = StepWork(decode_seqs=1, decode_tokens=32, decode_context=1024, draft_passes=5)
    perf = StepModel(H100_SXM, llama, EngineShape(tp=1, spec=spec))
    assert engine.roofline.step_seconds(verify) == pytest.approx(perf.step_seconds(verify))
    plain = _engine(model=llama).roofline.decode_step_seconds(1, 1024)
    speedup = spec.accept_length / engine.roofline.step_seconds(verify) * plain
    assert speedup == pytest.approx(2.36, rel=0.15)


def test_metrics_report_the_accept_length_of_each_interval() -> None:
    engine = _engine("--speculative-algorithm", "EAGLE3")
    stats = engine.scheduler.stats

    def scraped() -> float | None:
        engine.refresh_metrics()
        return engine.metrics.registry.get_sample_value(
            "sglang:spec_accept_length", engine.metrics.scheduler_labels
        )

    stats.spec_verify_calls_total, stats.spec_accepted_tokens_total = 10, 40
    assert scraped() == 4.0
    stats.spec_verify_calls_total, stats.spec_accepted_tokens_total = 20, 50  # 1 per call since
    assert scraped() == 1.0
    assert scraped() == 1.0  # no verify step in between: the last interval's value stays
    assert engine.spec_accept_length() == 2.5  # /v1/loads keeps the running mean


def test_an_engine_launched_with_deepep_prices_its_experts_through_deepep() -> None:
    """The simulator reads --moe-a2a-backend as the optimizer prices parallelism.moe_a2a."""
    dsv3, h200 = lookup_model("deepseek-v3"), resolve_gpu("H200")
    assert dsv3 is not None
    flags = ("--tp-size", "8", "--attn-dp-size", "8", "--ep-size", "8", "--quantization", "fp8")
    fused = Roofline(args_for(*flags), h200, dsv3)
    deepep = Roofline(args_for(*flags, "--moe-a2a-backend", "deepep"), h200, dsv3)
    work = StepWork(prefill_tokens=8 * 4096, prefill_pairs=8 * 4096 * 4096 / 2)
    assert deepep.step_seconds(work) < fused.step_seconds(work) / 2
