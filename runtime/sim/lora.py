"""LoRA adapters in the simulated engine, as SGLang 0.5.23 serves them.

- The registry: adapters loaded at start (``--lora-paths``) or through ``/load_lora_adapter``,
  at most ``--max-loaded-loras`` (a load beyond it is refused: SGLang evicts nothing from here);
  ``/unload_lora_adapter`` refuses new requests for the adapter at once and frees it when the
  requests already using it have finished. Loading reads the adapter from its source: a path
  (the model cache) at the node's cache read speed, a repository id over the hub download speed
  first (``runtime/catalog/startup.yaml``, the figures the engine's own start follows).
- The GPU pool: ``--max-loras-per-batch`` slots of ``--max-lora-rank``; the base model's
  requests hold a slot too (zero weights), as in SGLang's memory pool. A batch's adapters take
  slots before its step; a slot whose adapter no request in the batch uses is evicted by
  ``--lora-eviction-policy`` (lru: least recently used; fifo: first loaded), never a pinned one,
  the base's last. The host-to-GPU copy of each adapter taken in lengthens that step.
- The scheduler admits a waiting request only if the batch's distinct adapters, its own
  included, still fit the slots (SGLang's ``validate_lora_batch``); the others wait.

Adapter sizes come from ``runtime.lora`` (rank x target modules x layers); every adapter is
taken at ``--max-lora-rank`` (``SIM_DEFAULT_RANK`` without it), as the simulator reads no
adapter_config.json.
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from runtime.catalog.startup import startup_figures
from runtime.lora import LORA_BYTES_PER_PARAM, ArchDims, adapter_params, expand_modules
from runtime.sim.args import EngineArgs
from runtime.spec_base import MODEL_CACHE_PATH

GB = 1e9
# The rank the simulator gives adapters when the launch names no --max-lora-rank (SGLang would
# read each adapter's own from its config).
SIM_DEFAULT_RANK = 16
UNLOAD_POLL_S = 0.01
LORA_DISABLED = "LoRA is not enabled. Please set `--enable-lora` to enable LoRA."


class LoraError(Exception):
    """A load, unload or request SGLang refuses, with its message."""


@dataclass(frozen=True)
class LoraConfig:
    max_loras_per_batch: int
    max_loaded_loras: int | None
    rank: int
    modules: tuple[str, ...]
    eviction_policy: str


@dataclass(frozen=True)
class Adapter:
    name: str
    path: str
    pinned: bool
    bytes: float  # all GPUs together


def lora_config(args: EngineArgs, arch: ArchDims) -> LoraConfig | None:
    """The engine's LoRA settings, or None when it runs without LoRA (as SGLang: on with
    ``--enable-lora``, or with ``--lora-paths``)."""
    if not args.enable_lora and not args.lora_paths:
        return None
    return LoraConfig(
        max_loras_per_batch=args.max_loras_per_batch,
        max_loaded_loras=args.max_loaded_loras,
        rank=args.max_lora_rank or SIM_DEFAULT_RANK,
        modules=expand_modules(args.lora_target_modules, arch),
        eviction_policy=args.lora_eviction_policy,
    )


def pool_bytes_per_gpu(args: EngineArgs, arch: ArchDims) -> float:
    """The GPU pool's bytes on each GPU: every slot sized for the pool's rank; 0 without LoRA."""
    config = lora_config(args, arch)
    if config is None:
        return 0.0
    slot = adapter_params(arch, config.modules, config.rank) * LORA_BYTES_PER_PARAM
    return config.max_loras_per_batch * slot / max(1, args.tp_size * args.pp_size)


def parse_lora_paths(items: Iterable[Any]) -> list[tuple[str, str, bool]]:
    """(name, path, pinned) of each ``--lora-paths`` item: ``name=path``, ``path`` (named by
    itself) or SGLang's JSON object (already decoded by the argument parser)."""
    parsed = []
    for raw in items:
        item = json.loads(raw) if isinstance(raw, str) and raw.strip().startswith("{") else raw
        if isinstance(item, dict):
            pinned = bool(item.get("pinned"))
            parsed.append((str(item["lora_name"]), str(item["lora_path"]), pinned))
        elif "=" in item:
            name, path = item.split("=", 1)
            parsed.append((name, path, False))
        else:
            parsed.append((item, item, False))
    return parsed


class AdapterPool:
    """The registry of loaded adapters and the GPU pool's slots (see the module docstring)."""

    def __init__(self, config: LoraConfig, arch: ArchDims, shards: int) -> None:
        self.config = config
        self.shards = max(1, shards)
        self.adapter_bytes = (
            adapter_params(arch, config.modules, config.rank) * LORA_BYTES_PER_PARAM
        )
        self.registry: dict[str, Adapter] = {}
        self.unloading: set[str] = set()
        # Slot holders (None: the base model), in the order the policy reads: loaded order
        # (fifo) or use order (lru), oldest first.
        self.slots: OrderedDict[str | None, None] = OrderedDict()
        self.evictions = 0
        self.lock = asyncio.Lock()

    # ---- the registry ------------------------------------------------------------------------
    def load_seconds(self, path: str) -> float:
        """Reading the adapter from its source into host memory (simulated seconds)."""
        figures = startup_figures()
        seconds = self.adapter_bytes / GB / figures.cache_read_gbs
        if not path.startswith(("/", MODEL_CACHE_PATH)):
            seconds += self.adapter_bytes / GB / figures.hub_download_gbs
        return seconds

    def check_load(self, name: str, path: str, pinned: bool) -> None:
        if name in self.registry or name in self.unloading:
            raise LoraError(f"Failed to load LoRA adapter {name} because it is already loaded")
        limit = self.config.max_loaded_loras
        if limit is not None and len(self.registry) >= limit:
            raise LoraError(
                f"Cannot load LoRA adapter {name} at path {path}. Maximum number of loaded "
                f"LoRA adapters is {limit}. Please unload some LoRA adapters before loading "
                "new ones."
            )
        pinned_now = sum(1 for a in self.registry.values() if a.pinned)
        if pinned and pinned_now >= self.config.max_loras_per_batch - 1:
            raise LoraError(
                f"Already have {pinned_now} pinned adapters, max allowed is "
                f"{self.config.max_loras_per_batch - 1} (reserving 1 slot for dynamic use). "
                "Please unpin some adapters or increase max_loras_per_batch."
            )

    def register(self, name: str, path: str, pinned: bool) -> None:
        self.check_load(name, path, pinned)
        self.registry[name] = Adapter(name, path, pinned, self.adapter_bytes)

    def begin_unload(self, name: str) -> None:
        if name not in self.registry:
            raise LoraError(
                f"LoRA with name {name} does not exist. Loaded LoRAs: {list(self.registry)}"
            )
        del self.registry[name]
        self.unloading.add(name)

    def finish_unload(self, name: str) -> None:
        self.unloading.discard(name)
        self.slots.pop(name, None)

    def resolve(self, name: str | None) -> str | None:
        """The adapter a request names, checked to be loaded (None: the base model)."""
        if name is None:
            return None
        if name not in self.registry:
            raise LoraError(
                f"The following requested LoRA adapters are not loaded: {name}\n"
                f"Loaded adapters: {list(self.registry)}"
            )
        return name

    def loaded_adapters(self) -> dict[str, str]:
        return {a.name: a.path for a in self.registry.values()}

    # ---- the GPU pool ------------------------------------------------------------------------
    def _pinned(self) -> set[str | None]:
        return {name for name, a in self.registry.items() if a.pinned}

    def fits(self, names: set[str | None]) -> bool:
        """Whether one batch may hold these adapters: the slots not held by pinned adapters
        outside the batch must take the rest (SGLang's ``validate_lora_batch``)."""
        if len(names) > self.config.max_loras_per_batch:
            return False
        pinned = self._pinned()
        free = self.config.max_loras_per_batch - len(pinned - names)
        return len(names - pinned) <= free

    def prepare(self, names: set[str | None]) -> float:
        """Give the batch's adapters slots, evicting by the policy; the bytes per GPU copied
        from host memory into the pool for this step."""
        copied = 0.0
        for name in sorted(names, key=lambda n: (n is not None, n or "")):
            if name in self.slots:
                if self.config.eviction_policy == "lru":
                    self.slots.move_to_end(name)
                continue
            if len(self.slots) >= self.config.max_loras_per_batch:
                self._evict(names)
            self.slots[name] = None
            if name is not None:
                copied += self.adapter_bytes / self.shards
        return copied

    def _evict(self, keep: set[str | None]) -> None:
        pinned = self._pinned()
        candidates = [n for n in self.slots if n not in keep and n not in pinned]
        adapters = [n for n in candidates if n is not None]
        victim = adapters[0] if adapters else candidates[0]  # the base's slot goes last
        del self.slots[victim]
        if victim is not None:
            self.evictions += 1

    def slots_used(self, running: Iterable[str | None]) -> int:
        """SGLang's ``lora_pool_slots_used``: distinct adapters of the running batch (the base
        not counted)."""
        return len({name for name in running if name is not None})


def model_cards(pool: AdapterPool, served: str, created: int) -> list[dict[str, Any]]:
    """The loaded adapters as ``/v1/models`` lists them beside the base: parent = the base."""
    return [
        {
            "id": adapter.name,
            "object": "model",
            "created": created,
            "owned_by": "sglang",
            "root": adapter.path,
            "parent": served,
            "max_model_len": None,
        }
        for adapter in pool.registry.values()
    ]


def _result(pool: AdapterPool, error: str | None = None) -> web.Response:
    body = {
        "success": error is None,
        "error_message": error,
        "loaded_adapters": pool.loaded_adapters(),
    }
    return web.json_response(body, status=200 if error is None else 400)


def _disabled() -> web.Response:
    body = {"success": False, "error_message": LORA_DISABLED, "loaded_adapters": {}}
    return web.json_response(body, status=400)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise LoraError("the body must be a JSON object")
    return body


async def handle_load(
    pool: AdapterPool | None, time_scale: float, request: web.Request
) -> web.Response:
    """``POST /load_lora_adapter {"lora_name", "lora_path", "pinned"}``: read it, register it."""
    if pool is None:
        return _disabled()
    try:
        body = await _body(request)
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            raise LoraError("lora_name and lora_path are required strings")
        pinned = bool(body.get("pinned", False))
        async with pool.lock:
            pool.check_load(name, path, pinned)
            await asyncio.sleep(pool.load_seconds(path) / time_scale)
            pool.register(name, path, pinned)
    except LoraError as exc:
        return _result(pool, str(exc))
    return _result(pool)


async def handle_unload(
    pool: AdapterPool | None, in_use: Callable[[str], bool], request: web.Request
) -> web.Response:
    """``POST /unload_lora_adapter {"lora_name"}``: no new requests for it; freed once the
    requests using it have finished (``in_use(name)`` says whether any still does)."""
    if pool is None:
        return _disabled()
    try:
        body = await _body(request)
        name = body.get("lora_name")
        if not isinstance(name, str) or not name:
            raise LoraError("lora_name is a required string")
        async with pool.lock:
            pool.begin_unload(name)
        while in_use(name):
            await asyncio.sleep(UNLOAD_POLL_S)
        pool.finish_unload(name)
    except LoraError as exc:
        return _result(pool, str(exc))
    return _result(pool)
