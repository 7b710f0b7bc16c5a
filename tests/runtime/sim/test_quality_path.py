"""The KL quality gate end to end on real simulated engines.

The simulator serves teacher-forced input logprobs as SGLang 0.5.23 does (``logprob_start_len``,
``input_token_logprobs`` padded with None at the start, ``input_top_logprobs``), derived from the
token context only, so two BF16 engines agree exactly and quantized engines drift by how
aggressive their quantization is. The gate passes BF16 vs FP8 and fails BF16 vs MXFP4.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runtime.quality import token_kl
from runtime.quality_run import QualityRun, builtin_prompts, main, run_quality
from runtime.sim.launcher import ManagedProcess, start_engine
from runtime.sim.memory import output_noise
from runtime.sim.sampling import context_distribution, context_hashes
from tests.runtime.sim.conftest import TIME_SCALE

PROMPTS = builtin_prompts()[:6]  # enough tokens for stable figures, few enough to stay fast
CONFIGS = {
    "bf16": [],
    "bf16-twin": [],
    "fp8": ["--quantization", "fp8"],
    "mxfp4": ["--quantization", "mxfp4"],
}


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    log_dir = tmp_path_factory.mktemp("quality")
    started: dict[str, ManagedProcess] = {}
    try:
        for name, args in CONFIGS.items():
            started[name] = start_engine(args=args, time_scale=TIME_SCALE, log_dir=log_dir)
        yield started
    finally:
        for proc in started.values():
            proc.stop(timeout=5)


def _generate(engine: ManagedProcess, body: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{engine.url}/generate", json=body, timeout=30)


def test_input_logprobs_have_sglangs_shape(engines: dict[str, ManagedProcess]) -> None:
    ids = [11, 22, 33, 44, 55, 66]
    body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}, "return_logprob": True}
    meta = _generate(engines["bf16"], {**body, "logprob_start_len": 2, "top_logprobs_num": 3})
    info = meta.json()["meta_info"]
    # Aligned with input_ids[2:]; the first entry is SGLang's None padding.
    assert [row[1] for row in info["input_token_logprobs"]] == ids[2:]
    assert info["input_token_logprobs"][0][0] is None and info["input_top_logprobs"][0] is None
    assert all(row[0] < 0 for row in info["input_token_logprobs"][1:])
    assert all(len(top) == 3 for top in info["input_top_logprobs"][1:])
    # SGLang's default (-1) covers the last prompt token only.
    default = _generate(engines["bf16"], body).json()["meta_info"]
    assert default["input_token_logprobs"] == [[None, 66, None]]
    refused = _generate(engines["bf16"], {**body, "logprob_start_len": 6})
    assert refused.status_code == 400


def test_two_bf16_engines_agree_exactly_and_quantization_drifts(
    engines: dict[str, ManagedProcess],
) -> None:
    body = {
        "input_ids": list(range(100, 140)),
        "sampling_params": {"max_new_tokens": 0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": 5,
    }
    tops = {
        name: _generate(engines[name], body).json()["meta_info"]["input_top_logprobs"]
        for name in ("bf16", "bf16-twin", "fp8")
    }
    assert tops["bf16"] == tops["bf16-twin"]
    assert tops["bf16"] != tops["fp8"]


@pytest.mark.parametrize("name", ["bf16", "mxfp4"])
def test_greedy_output_scores_the_same_fed_back_teacher_forced(
    engines: dict[str, ManagedProcess], name: str
) -> None:
    """A greedy token is the top-1 of its own distribution, and its logprob is the input logprob
    of the same prefix sent back as a prompt: what the KL gate relies on when it scores a
    baseline's outputs teacher-forced."""
    prompt = list(range(300, 330))
    body = {
        "input_ids": prompt,
        "sampling_params": {"max_new_tokens": 12, "ignore_eos": True, "temperature": 0},
        "return_logprob": True,
        "top_logprobs_num": 3,
    }
    meta = _generate(engines[name], body).json()["meta_info"]
    output = [row[1] for row in meta["output_token_logprobs"]]
    assert [top[0][1] for top in meta["output_top_logprobs"]] == output
    scored = {
        "input_ids": prompt + output,
        "sampling_params": {"max_new_tokens": 0},
        "return_logprob": True,
        "logprob_start_len": len(prompt) - 1,
        "top_logprobs_num": 3,
    }
    fed_back = _generate(engines[name], scored).json()["meta_info"]
    assert fed_back["input_token_logprobs"][1:] == meta["output_token_logprobs"]
    assert fed_back["input_top_logprobs"][1:] == meta["output_top_logprobs"]


def test_distance_grows_with_quantization_aggressiveness() -> None:
    configs = [
        (None, "auto"),
        (None, "fp8_e4m3"),
        ("fp8", "auto"),
        ("modelopt_fp4", "auto"),
        ("mxfp4", "auto"),
        ("mxfp4", "fp8_e4m3"),
    ]
    noises = [output_noise(q, kv) for q, kv in configs]
    assert noises == sorted(noises) and noises[0] == 0.0 and len(set(noises)) == len(noises)
    contexts = context_hashes(list(range(200)))
    means = []
    for noise in noises:
        kls = []
        for context in contexts:
            exact, _ = context_distribution(context, 0.0)
            drifted, _ = context_distribution(context, noise)
            kls.append(
                token_kl(
                    {t.token_id: t.logprob for t in exact}, {t.token_id: t.logprob for t in drifted}
                )
            )
        means.append(sum(kls) / len(kls))
    assert means[0] == 0.0 and means == sorted(means)


def test_gate_passes_fp8_and_fails_aggressive_fp4(engines: dict[str, ManagedProcess]) -> None:
    base = engines["bf16"].url
    twin = run_quality(QualityRun(base, engines["bf16-twin"].url, PROMPTS))
    assert twin.mean_kl == 0.0 and twin.top1_agreement == 1.0 and twin.verdict().passed
    fp8 = run_quality(QualityRun(base, engines["fp8"].url, PROMPTS))
    assert fp8.tokens > 100 and fp8.verdict().passed, fp8.as_dict()
    fp4 = run_quality(QualityRun(base, engines["mxfp4"].url, PROMPTS))
    assert not fp4.verdict().passed, fp4.as_dict()
    assert fp4.mean_kl > fp8.mean_kl > 0


def test_cli_exit_code_and_json_report(
    engines: dict[str, ManagedProcess], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS[:3]))
    argv = ["--baseline", engines["bf16"].url, "--prompts", str(prompts), "--json"]
    assert main([*argv, "--candidate", engines["mxfp4"].url]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False and report["worst_prompts"][0]["prompt"] in PROMPTS
    assert main([*argv, "--candidate", engines["fp8"].url]) == 0
    assert main([*argv, "--candidate", "http://127.0.0.1:9"]) == 2
