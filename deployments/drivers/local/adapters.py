"""LoRA adapters changed on a local endpoint's running engines, without a restart.

Each engine process of the serving revision is asked through SGLang's own routes
(``/load_lora_adapter``, ``/unload_lora_adapter``: ``runtime.client.EngineClient``), then its
record is renamed to the new revision's (``r<revision>-<role>-<index>``, its log file with it), so
the driver's next ``apply`` of that revision finds its replicas running and starts none; one
that died meanwhile is started again from the new revision's flags (``--lora-paths``).

All or nothing across the engines: the new adapters are loaded everywhere first; an engine that
refuses one has every load of this change undone on every engine before the refusal is raised,
so the endpoint keeps serving what it served. The replaced and removed adapters are unloaded
only then.
"""

from __future__ import annotations

from deployments.drivers.errors import AdapterChangeRefused, TemporaryDriverError
from deployments.drivers.local.processes import ProcessRecord, ProcessTable
from runtime.client import EngineClient, RuntimeUnavailable
from runtime.lora import LoraAdapter, adapter_path
from runtime.lora_live import LoraLiveChange

# Loading reads an adapter's weights from its source: longer than a probe.
LOAD_TIMEOUT_S = 120.0


def apply_adapters(
    table: ProcessTable,
    serving: int,
    number: int,
    change: LoraLiveChange,
    api_key: str,
) -> None:
    """``change`` on every engine of revision ``serving``, which then become ``number``'s."""
    # A warm pool's released replica is left to retire with the old revision: it serves
    # nothing, and its engine holds no GPU memory to load an adapter into.
    records = [
        r
        for r in table.records()
        if r.role != "router"
        and r.revision == serving
        and r.stopping_since is None
        and r.released_at is None
    ]
    running = [r for r in records if r.alive()]
    for record in running:
        if not _ready(record, api_key):
            raise TemporaryDriverError(f"{record.name} is still starting; adapters wait for it")
    replaced = set(change.unload)
    fresh = [a for a in change.load if a.name not in replaced]
    loaded: list[tuple[ProcessRecord, str]] = []
    for record in running:
        for adapter in fresh:
            why = _load(record, adapter, api_key)
            if why:
                _undo(loaded, api_key)
                raise AdapterChangeRefused(f"{record.name} could not load {adapter.name!r}: {why}")
            loaded.append((record, adapter.name))
    for record in running:
        for name in change.unload:
            _unload(record, name, api_key)
        for adapter in change.load:
            if adapter.name in replaced and (why := _load(record, adapter, api_key)):
                raise AdapterChangeRefused(f"{record.name} could not load {adapter.name!r}: {why}")
    for record in records:
        _relabel(table, record, number)


def _ready(record: ProcessRecord, api_key: str) -> bool:
    with EngineClient(record.url, timeout=2.0, api_key=api_key) as client:
        return client.ready()


def _load(record: ProcessRecord, adapter: LoraAdapter, api_key: str) -> str:
    try:
        with EngineClient(record.url, timeout=LOAD_TIMEOUT_S, api_key=api_key) as client:
            return client.load_lora_adapter(adapter.name, adapter_path(adapter), adapter.pinned)
    except RuntimeUnavailable as exc:
        raise TemporaryDriverError(f"{record.name} did not answer a load: {exc}") from exc


def _unload(record: ProcessRecord, name: str, api_key: str) -> None:
    try:
        with EngineClient(record.url, timeout=LOAD_TIMEOUT_S, api_key=api_key) as client:
            why = client.unload_lora_adapter(name)
    except RuntimeUnavailable as exc:
        raise TemporaryDriverError(f"{record.name} did not answer an unload: {exc}") from exc
    if why and "not loaded" not in why.lower():  # gone already is what was asked
        raise AdapterChangeRefused(f"{record.name} could not unload {name!r}: {why}")


def _undo(loaded: list[tuple[ProcessRecord, str]], api_key: str) -> None:
    """Unload what this change loaded, best effort: an engine that does not answer now keeps
    an adapter no request can reach (the gateway routes by the serving revision's names)."""
    for record, name in loaded:
        try:
            with EngineClient(record.url, timeout=LOAD_TIMEOUT_S, api_key=api_key) as client:
                client.unload_lora_adapter(name)
        except RuntimeUnavailable:
            continue


def _relabel(table: ProcessTable, record: ProcessRecord, number: int) -> None:
    """``record`` as a replica of revision ``number``: same process, new name and revision."""
    old = record.name
    _, role, index = old.split("-", 2)
    new = f"r{number}-{role}-{index}"
    log = table.log_path(old)
    if log.exists():
        log.replace(table.log_path(new))  # the process writes on through its open file
    table.forget(record)
    record.name, record.revision = new, number
    table.save(record)
