"""Whether a change of RuntimeSpec is adapters only, so a running engine takes it through SGLang's
`/unload_lora_adapter` and `/load_lora_adapter` instead of a restart (a rollout).

The platform calls `lora_live_change(old, new)` with the running revision's spec and the new one:
None means roll out; otherwise unload `unload` (by name), then load `load` (name, path from
`runtime.lora.adapter_path`, pinned), each change still recorded as a revision.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from runtime.lora import LoraAdapter, adapter_path
from runtime.spec import RuntimeSpec


@dataclass(frozen=True)
class LoraLiveChange:
    """What to do on a running engine to go from one spec to the next: unload these adapter
    names, then load these adapters (`POST /unload_lora_adapter {"lora_name"}`, then
    `POST /load_lora_adapter {"lora_name", "lora_path", "pinned"}`)."""

    load: tuple[LoraAdapter, ...]
    unload: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.load and not self.unload

    def calls(self) -> list[tuple[str, dict[str, object]]]:
        """The engine API calls, in order, as (path, JSON body): every unload, then every load."""
        Call = tuple[str, dict[str, object]]
        unloads: list[Call] = [("/unload_lora_adapter", {"lora_name": n}) for n in self.unload]
        loads: list[Call] = [
            ("/load_lora_adapter",
             {"lora_name": a.name, "lora_path": adapter_path(a), "pinned": a.pinned})
            for a in self.load
        ]  # fmt: skip
        return [*unloads, *loads]


def lora_live_change(old: RuntimeSpec, new: RuntimeSpec) -> LoraLiveChange | None:
    """The adapter loads and unloads that take a running engine of `old` to `new`, or None when
    the change needs a restart (a rollout).

    Live only when everything but `lora.adapters` is equal and LoRA was already on (the engine
    sized its pool at start-up from max_lora_rank and target_modules: those, and every other
    lora setting, are start-up flags). An adapter whose source, revision or pinning changed is
    unloaded and loaded again under its name. The new adapters must also fit what the running
    pool was sized for: a rank above the pool's, or (target modules left to SGLang) any new
    adapter at all when the engine took its modules from the first adapters, needs a restart.
    Removing the last adapter is live only while `enabled` stays true (else LoRA goes off,
    which is a restart). Validate `new` first; this does not repeat the rules.
    """
    if not old.lora.active or not new.lora.active:
        return None
    if _without_adapters(old) != _without_adapters(new):
        return None
    before = {adapter.name: adapter for adapter in old.lora.adapters}
    after = {adapter.name: adapter for adapter in new.lora.adapters}
    unload = tuple(name for name, adapter in before.items() if after.get(name) != adapter)
    load = tuple(adapter for name, adapter in after.items() if before.get(name) != adapter)
    if load and not _pool_takes(old, load):
        return None
    return LoraLiveChange(load=load, unload=unload)


def _without_adapters(spec: RuntimeSpec) -> str:
    data = spec.model_dump(mode="json")
    lora = data["lora"]
    lora["adapters"] = []
    # An unset max_lora_rank follows the adapters; what the engine runs with is the resolved one.
    lora["max_lora_rank"] = spec.lora.resolved_max_lora_rank
    lora["enabled"] = True
    return json.dumps(data, sort_keys=True)


def _pool_takes(spec: RuntimeSpec, adapters: Sequence[LoraAdapter]) -> bool:
    if spec.lora.target_modules is None:
        # SGLang sized the pool for the union of the first adapters' modules, which Plinth does
        # not know: a new adapter may target others, and would be refused.
        return False
    return all(adapter.rank <= spec.lora.resolved_max_lora_rank for adapter in adapters)
