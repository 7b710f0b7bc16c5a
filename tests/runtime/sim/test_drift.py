"""The simulator's per-layer quantization drift: learned from a checkpoint's recipe, signed so
blocks cancel, and today's scalar where the checkpoint says nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.quality import token_kl
from runtime.sim.args import parse_engine_args
from runtime.sim.drift import Drift, block_sign_and_size, checkpoint_drift
from runtime.sim.memory import NOISE_NATS, output_drift, output_noise
from runtime.sim.sampling import Noise, context_distribution, context_hashes

BLOCKS = 32
LINEARS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")  # fmt: skip
EIGHT_BIT = {"num_bits": 8, "type": "int", "strategy": "channel"}
NOISE_OF = {"eight_bit": NOISE_NATS["weights:eight_bit"]}


def checkpoint(folder: Path, quantized: set[int], weights: dict[str, object] = EIGHT_BIT) -> str:
    """A compressed-tensors config.json as llmcompressor writes it: explicit targets, the rest
    (and lm_head) in ``ignore``."""
    names = {i: [f"model.layers.{i}.{m}" for m in LINEARS] for i in range(BLOCKS)}
    config = {
        "num_hidden_layers": BLOCKS,
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "config_groups": {
                "group_0": {
                    "targets": [n for i in sorted(quantized) for n in names[i]],
                    "weights": weights,
                }
            },
            "ignore": [n for i in range(BLOCKS) if i not in quantized for n in names[i]]
            + ["lm_head"],
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def mean_kl(noise: Noise) -> float:
    """The simulator's KL(unquantized || quantized) over 300 contexts, as the gate measures it."""
    kls = []
    for context in context_hashes(list(range(300))):
        exact, _ = context_distribution(context, 0.0)
        drifted, _ = context_distribution(context, noise)
        kls.append(
            token_kl(
                {t.token_id: t.logprob for t in exact}, {t.token_id: t.logprob for t in drifted}
            )
        )
    return sum(kls) / len(kls)


def drift_of(folder: Path, quantized: set[int]) -> Drift:
    drift = checkpoint_drift(checkpoint(folder, quantized), NOISE_OF)
    assert drift is not None
    return drift


def test_quantizing_one_more_block_can_bring_the_output_closer(tmp_path: Path) -> None:
    """The seed's observation: with every block that pushes one way quantized, quantizing a
    small block that pushes the other way lowers the KL to the original."""
    signs = {i: block_sign_and_size(i) for i in range(BLOCKS)}
    one_way = {i for i, (sign, _) in signs.items() if sign > 0}
    other = min((i for i in signs if i not in one_way), key=lambda i: signs[i][1])
    before = drift_of(tmp_path / "a", one_way)
    after = drift_of(tmp_path / "b", one_way | {other})
    assert abs(after.shared) < abs(before.shared) and after.private > before.private
    assert mean_kl(after) < mean_kl(before)
    # Errors mostly add (the calibration's shared share is small): more blocks, more drift.
    every = drift_of(tmp_path / "c", set(range(BLOCKS)))
    assert mean_kl(drift_of(tmp_path / "d", set(range(4)))) < mean_kl(every)


def test_the_engine_learns_the_recipe_from_its_checkpoint(tmp_path: Path) -> None:
    every = checkpoint(tmp_path / "every", set(range(BLOCKS)))
    kept = checkpoint(tmp_path / "kept", set(range(BLOCKS)) - {3, 17})
    learned = output_drift(parse_engine_args(["--model-path", every]))
    assert isinstance(learned, Drift)
    # Every block at 8 bits drifts about as far as the scalar an FP8 spec gets.
    assert learned.scale == pytest.approx(NOISE_OF["eight_bit"], rel=0.25)
    with_kv = output_drift(
        parse_engine_args(["--model-path", every, "--kv-cache-dtype", "fp8_e4m3"])
    )
    assert isinstance(with_kv, Drift)
    assert with_kv.shared == learned.shared + output_noise(None, "fp8_e4m3")
    assert output_drift(parse_engine_args(["--model-path", kept])) != learned
    four_bit = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}
    fp4 = checkpoint(tmp_path / "fp4", set(range(BLOCKS)), four_bit)
    wider = output_drift(parse_engine_args(["--model-path", fp4]))
    assert isinstance(wider, Drift) and wider.scale > learned.scale


def test_a_class_target_with_an_ignore_list_reads_as_the_same_recipe(tmp_path: Path) -> None:
    """llmcompressor's other spelling: targets ["Linear"], the kept modules in ``ignore``."""
    explicit = drift_of(tmp_path / "explicit", set(range(BLOCKS)) - {5})
    config = json.loads((Path(checkpoint(tmp_path / "class", set())) / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["targets"] = ["Linear"]
    config["quantization_config"]["ignore"] = [f"model.layers.5.{m}" for m in LINEARS] + ["lm_head"]
    (tmp_path / "class" / "config.json").write_text(json.dumps(config))
    assert checkpoint_drift(str(tmp_path / "class"), NOISE_OF) == explicit


def test_without_a_recipe_the_scalar_per_format_stays(tmp_path: Path) -> None:
    plain = parse_engine_args(
        ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--quantization", "fp8"]
    )
    assert output_drift(plain) == output_noise("fp8", "auto")
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 4}))
    bf16 = parse_engine_args(["--model-path", str(tmp_path)])
    assert output_drift(bf16) == 0.0
    for context in context_hashes(list(range(20))):
        assert context_distribution(context, 0.2) == context_distribution(context, Drift(0.2))
