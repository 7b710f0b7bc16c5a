"""The candidate recipes a search tries, from the per-layer sensitivity the tool measured.

``propose(sensitivity, fmt)`` returns, in this order (duplicates dropped, so a small model may get
fewer): every layer quantized; the most sensitive blocks kept in BF16 at two budgets (one block,
and a quarter of the blocks); the same blocks quantized instead at another format that costs no
more bytes (``cheaper_siblings``: INT8 W8A8 for FP8 and back, W4A16 for NVFP4), which keeps the
predicted throughput while a float format spares a block with outliers that an integer one
crushes (or the reverse); the first and last blocks kept; attention only (the MLPs kept); MLPs
only (attention kept). ``lm_head`` stays BF16 in every one unless ``quantize_lm_head``.
Sensitivity is KL(original || the model with only that block quantized): a block's own harm,
which is what keeping it in BF16 saves; errors of several blocks may still add or cancel, which
is why every candidate is measured whole rather than predicted from the sum.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from runtime.catalog.quantization import tool_format, tool_formats, weight_format
from runtime.quantize.events import LayerSensitivity
from runtime.quantize.recipe import LM_HEAD, Recipe, known_format

ATTENTION = "*.self_attn.*"
MLP = "*.mlp.*"
SENSITIVE_SHARE = 0.25  # the second budget: this share of the blocks kept in BF16


def block_pattern(block: str) -> str:
    """The glob for every module of one decoder block (``model.layers.3`` -> ``.3.*``)."""
    return f"{block}.*"


def block_index(name: str) -> int:
    """A block's position in the model (its module name's last number)."""
    found = re.search(r"(\d+)\Z", name)
    if found is None:
        raise ValueError(f"{name!r} is not a numbered decoder block")
    return int(found.group(1))


def most_sensitive(sensitivity: Sequence[LayerSensitivity], count: int) -> list[str]:
    """The `count` blocks whose quantization alone moves the output most (ties: earlier first)."""
    ranked = sorted(sensitivity, key=lambda layer: (-layer.kl, block_index(layer.name)))
    return [layer.name for layer in ranked[:count]]


def priced_bytes(fmt: str) -> float:
    """Bytes per weight the performance model prices format `fmt` at (the catalogue's row)."""
    form = tool_format(fmt)
    row = weight_format(form.priced_as) if form else None
    if row is None:
        raise ValueError(f"format {fmt!r} has no priced weights row")
    return row.bytes


SIBLING_BYTES = 0.9  # a sibling costs at most fmt's bytes and at least this share of them


def cheaper_siblings(fmt: str) -> list[str]:
    """The other job formats of the same width whose weights cost no more bytes than `fmt`'s
    (INT8 W8A8 and FP8; W4A16 for NVFP4): the same predicted throughput, a different error."""
    own = priced_bytes(fmt)
    return [g for g in tool_formats() if g != fmt and SIBLING_BYTES * own <= priced_bytes(g) <= own]


def propose(
    sensitivity: Sequence[LayerSensitivity], fmt: str, *, quantize_lm_head: bool = False
) -> list[Recipe]:
    """The candidate recipes for target format `fmt` (see the module docstring)."""
    known_format(fmt)
    blocks = sorted((layer.name for layer in sensitivity), key=block_index)
    formats = {LM_HEAD: fmt} if quantize_lm_head else {}
    recipes = [Recipe(name="all-layers", formats=dict(formats))]
    budgets = sorted({1, math.ceil(SENSITIVE_SHARE * len(blocks))})
    for count in (n for n in budgets if 0 < n < len(blocks)):
        kept = [block_pattern(b) for b in most_sensitive(sensitivity, count)]
        recipes.append(Recipe(name=f"keep-{count}-most-sensitive", keep_bf16=kept, formats=formats))
        for alt in cheaper_siblings(fmt):
            moved = {**{pattern: alt for pattern in kept}, **formats}
            recipes.append(Recipe(name=f"{count}-most-sensitive-at-{alt}", formats=moved))
    if len(blocks) > 2:
        first_last = [block_pattern(blocks[0]), block_pattern(blocks[-1])]
        recipes.append(Recipe(name="keep-first-last", keep_bf16=first_last, formats=formats))
    recipes.append(Recipe(name="attention-only", keep_bf16=[MLP], formats=formats))
    recipes.append(Recipe(name="mlp-only", keep_bf16=[ATTENTION], formats=formats))
    unique: dict[tuple[frozenset[str], tuple[tuple[str, str], ...]], Recipe] = {}
    for recipe in recipes:
        key = (frozenset(recipe.keep_bf16), tuple(sorted(recipe.formats.items())))
        unique.setdefault(key, recipe)
    return list(unique.values())
