"""Torch and llmcompressor work of a job: load, score, quantize one recipe, export.

Everything here runs on whatever torch sees (the tests and a local run hide the GPUs with
CUDA_VISIBLE_DEVICES=""; a Kubernetes Job on a GPU node uses its GPU). Quantization is
llmcompressor's ``oneshot`` with a compressed-tensors preset scheme per format; after it the model
in memory runs its quantized Linear modules as quantize-dequantize (the library's simulated
quantization), which is what the KL is measured on, and ``save_pretrained(save_compressed=True)``
writes the checkpoint SGLang loads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from runtime.catalog.quantization import tool_format
from runtime.quality import TopLogprobs
from runtime.quantize.recipe import Recipe

TOP_K = 256  # candidates kept per position: the whole vocabulary of a small model (exact KL)
BUILTIN = Path(__file__).with_name("generic.jsonl")
BLOCK = re.compile(r"(?:^|\.)layers\.\d+$")  # a decoder block: model.layers.3


def read_texts(path: str | None, samples: int, offset: int) -> list[str]:
    """`samples` texts of a JSONL of {"text": ...}; None: the built-in generic set, whose even
    lines calibrate (offset 0) and odd lines evaluate (offset 1), so the two never overlap."""
    source = Path(path) if path else BUILTIN
    rows = [json.loads(line)["text"] for line in source.read_text().splitlines() if line.strip()]
    if path is None:
        rows = rows[offset::2]
    texts = [str(text) for text in rows if str(text).strip()]
    if not texts:
        raise ValueError(f"{source} holds no texts")
    return (texts * (samples // len(texts) + 1))[:samples]


def load_tokenizer(source: str) -> PreTrainedTokenizerBase | None:
    """The checkpoint's tokenizer, or None when it ships none (ids are then bytes)."""
    if not any(
        (Path(source) / name).exists() for name in ("tokenizer.json", "tokenizer_config.json")
    ):
        return None
    return AutoTokenizer.from_pretrained(source)


def device() -> str:
    """Where the job runs: the GPU a Kubernetes Job is given, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def load_model(source: str) -> torch.nn.Module:
    model = AutoModelForCausalLM.from_pretrained(source, dtype="auto").to(device())
    model.eval()
    return model


def encode(
    texts: Sequence[str], tokenizer: PreTrainedTokenizerBase | None, vocab: int, max_len: int
) -> list[list[int]]:
    """Token ids of each text, at most `max_len` (bytes modulo the vocabulary without one)."""
    if tokenizer is None:
        return [[b % vocab for b in text.encode()][:max_len] for text in texts]
    return [tokenizer(text)["input_ids"][:max_len] for text in texts]


@torch.no_grad()
def top_logprobs(model: torch.nn.Module, prompts: Sequence[list[int]]) -> list[list[TopLogprobs]]:
    """Per prompt, per position: the next-token top-k as {token id: logprob}."""
    out = []
    for ids in prompts:
        logits = model(torch.tensor([ids], device=device())).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        values, indices = logprobs.topk(min(TOP_K, logprobs.shape[-1]), dim=-1)
        out.append(
            [
                dict(zip(row_i.tolist(), row_v.tolist(), strict=True))
                for row_v, row_i in zip(values, indices, strict=True)
            ]
        )
    return out


def linear_names(model: torch.nn.Module) -> dict[str, int]:
    """Every Linear module's name and weight count."""
    return {
        name: module.weight.numel()
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear)
    }


def block_names(model: torch.nn.Module) -> list[str]:
    """The decoder blocks' module names (model.layers.0, ...), in order."""
    return [name for name, _ in model.named_modules() if BLOCK.search(name)]


def assignment(model: torch.nn.Module, recipe: Recipe, fmt: str) -> dict[str, str | None]:
    """Each Linear's format under `recipe` (None: kept in BF16)."""
    return {name: recipe.format_of(name, fmt) for name in linear_names(model)}


def quantize(
    model: torch.nn.Module,
    formats: dict[str, str | None],
    calibration: Sequence[list[int]],
) -> None:
    """Quantize `model` in place: each Linear at its format, through llmcompressor's oneshot."""
    from compressed_tensors.quantization import preset_name_to_scheme
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier

    groups = {}
    calibrated = False
    for index, fmt in enumerate(sorted({f for f in formats.values() if f})):
        form = tool_format(fmt)
        assert form is not None
        targets = sorted(name for name, f in formats.items() if f == fmt)
        groups[f"group_{index}"] = preset_name_to_scheme(form.scheme, targets)
        calibrated = calibrated or form.calibrated
    if not groups:
        return
    check_group_sizes(model, groups)
    # GPTQ (error-compensating rounding over the calibration set) for 4-bit integer weights,
    # where round-to-nearest loses most; 8-bit and FP weights round to nearest.
    gptq = any(
        groups[g].weights and groups[g].weights.num_bits == 4 and groups[g].weights.type == "int"
        for g in groups
    )
    modifier_type = GPTQModifier if gptq else QuantizationModifier
    modifier = modifier_type(config_groups=groups)
    dataset = None
    if calibrated:
        dataset = Dataset.from_dict(
            {"input_ids": list(calibration), "attention_mask": [[1] * len(c) for c in calibration]}
        )
    oneshot(
        model=model,
        dataset=dataset,
        recipe=[modifier],
        num_calibration_samples=len(calibration),
        max_seq_length=max(len(c) for c in calibration),
    )


def check_group_sizes(model: torch.nn.Module, groups: dict[str, Any]) -> None:
    """Refuse, naming the modules, a grouped scheme (W4A16's 128, NVFP4's 16) over a Linear whose
    input width the group does not divide (the library would fail deep inside instead)."""
    modules = dict(model.named_modules())
    misfits = []
    for scheme in groups.values():
        group = scheme.weights.group_size if scheme.weights else None
        for name in scheme.targets if group else ():
            width = modules[name].in_features
            if width % group:
                misfits.append(f"{name} ({width} inputs, groups of {group})")
    if misfits:
        raise ValueError(
            "these modules cannot take the format's weight groups; keep them in BF16: "
            + ", ".join(misfits[:8])
        )


def export(model: torch.nn.Module, tokenizer: PreTrainedTokenizerBase | None, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, save_compressed=True)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)


def checkpoint_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


def param_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
