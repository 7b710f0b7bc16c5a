"""How far a quantized checkpoint's next-token logits drift, layer by layer, with signs.

Each decoder block a checkpoint quantizes moves the logits by its own error. Part of that error
lies along a direction every block shares (``shared``: signed, so blocks pushing opposite ways
cancel, and quantizing one more block can bring the output closer to the original) and the
rest along the block's own direction (``private``: those only add, as a root sum of squares).
The share of the shared part and the spread of blocks' sizes are the quantization catalogue's
``layer_drift`` (calibrated on the quantization tool's small-model runs; the catalogue says
which). Each block's sign and size are fixed per block (a hash of its index), so the same
block always pushes the same way whatever else a recipe quantizes.

The simulator learns the recipe from the checkpoint when the model path is a folder whose
config.json carries a compressed-tensors ``quantization_config``: its config groups say each
block's modules' bits, its ``ignore`` list which modules stayed BF16. Otherwise it falls back
to one scalar per format (``runtime.sim.memory.output_noise``), which is ``Drift(noise, 0)``:
every logit moved along the shared direction, exactly as before per-layer terms existed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.catalog.quantization import layer_drift

BLOCK = re.compile(r"(?:^|\.)layers\.(\d+)\.")
LINEARS_PER_BLOCK = 7  # q, k, v, o, gate, up, down: a class target ("Linear") covers them all


@dataclass(frozen=True)
class Drift:
    """The logit shift of a configuration: ``shared`` (signed) and ``private`` (>= 0), in nats."""

    shared: float = 0.0
    private: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.shared or self.private)

    @property
    def scale(self) -> float:
        """The shift's overall size (its root mean square per logit)."""
        return math.hypot(self.shared, self.private)

    def plus(self, noise: float) -> Drift:
        """This drift with a scalar one (a KV cache's) added along the shared direction."""
        return Drift(self.shared + noise, self.private)


def block_sign_and_size(index: int) -> tuple[int, float]:
    """Block `index`'s fixed sign and its size relative to the mean (in [1 - s, 1 + s])."""
    digest = hashlib.blake2b(index.to_bytes(4, "little"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    spread = layer_drift().size_spread
    size = 1.0 - spread + 2.0 * spread * ((value >> 1) % 10_000) / 10_000
    return (1 if value & 1 else -1), size


def per_block_drift(noise_by_block: dict[int, float], num_blocks: int) -> Drift:
    """The drift of quantizing blocks at the given noises (each a whole-model figure: what every
    block at that format together would move the logits), the other blocks kept BF16."""
    shared_share, spread = layer_drift().shared_share, layer_drift().size_spread
    # Sizes are uniform in [1 - s, 1 + s], so their mean square is 1 + s^2 / 3: dividing by it
    # keeps every block quantized at one format as far from the original, on average, as that
    # format's scalar (its private part's root sum of squares is the scalar's figure).
    norm = math.sqrt(max(1, num_blocks) * (1.0 + spread * spread / 3.0))
    shared, private_sq = 0.0, 0.0
    for index, noise in noise_by_block.items():
        sign, size = block_sign_and_size(index)
        magnitude = noise * size / norm
        shared += sign * magnitude
        private_sq += magnitude * magnitude
    return Drift(
        shared=math.sqrt(shared_share) * shared,
        private=math.sqrt(1.0 - shared_share) * math.sqrt(private_sq),
    )


def checkpoint_config(model_path: str) -> dict[str, Any] | None:
    """The model folder's config.json, when the path is a folder that has one."""
    path = Path(model_path) / "config.json"
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def block_noises(
    quantization: dict[str, Any], noise_of: dict[str, float], num_blocks: int
) -> dict[int, float] | None:
    """Each block's noise under a compressed-tensors quantization_config (scaled by the share
    of its modules quantized); None when the config says nothing per module."""
    ignored = [str(name) for name in quantization.get("ignore") or []]
    groups = quantization.get("config_groups") or {}
    noises: dict[int, float] = {}
    for group in groups.values():
        weights = group.get("weights") or {}
        noise = noise_of.get(weight_class(weights), 0.0)
        targets = [str(t) for t in group.get("targets") or []]
        named = [t for t in targets if BLOCK.search(t)]
        for index in range(num_blocks):
            if named:
                share = sum(1 for t in named if _in_block(t, index)) / LINEARS_PER_BLOCK
            elif targets:  # a class target ("Linear"): every module but the ignored ones
                kept = sum(1 for name in ignored if _in_block(name, index))
                share = max(0.0, 1.0 - kept / LINEARS_PER_BLOCK)
            else:
                share = 0.0
            if share > 0:
                noises[index] = noises.get(index, 0.0) + noise * min(1.0, share)
    return noises if groups else None


def weight_class(weights: dict[str, Any]) -> str:
    """The catalogue noise class of a config group's weights: 8-bit, or calibrated 4-bit."""
    bits = int(weights.get("num_bits") or 16)
    if bits >= 16:
        return ""
    return "eight_bit" if bits >= 8 else "calibrated_four_bit"


def _in_block(name: str, index: int) -> bool:
    found = BLOCK.search(name)
    return found is not None and int(found.group(1)) == index


def checkpoint_drift(model_path: str, noise_of: dict[str, float]) -> Drift | None:
    """The per-block drift of the checkpoint at `model_path` (see the module docstring), or
    None when it carries no per-module quantization_config to learn from."""
    config = checkpoint_config(model_path)
    if config is None:
        return None
    quantization = config.get("quantization_config")
    if (
        not isinstance(quantization, dict)
        or quantization.get("quant_method") != "compressed-tensors"
    ):
        return None
    num_blocks = int(config.get("num_hidden_layers") or 0)
    noises = block_noises(quantization, noise_of, num_blocks) if num_blocks else None
    return None if noises is None else per_block_drift(noises, num_blocks)
