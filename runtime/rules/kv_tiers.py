"""HiCache's tiers (`kv_cache.tiers`): what SGLang 0.5.23 needs for them, and whether the host
tier fits the node's memory.

Where SGLang would silently rewrite a setting at start-up (a layout the I/O backend cannot use,
a layer-first layout behind a storage backend), Plinth refuses it instead and names the value
SGLang would have used: a person should get what the spec says, not a quiet substitute.
"""

from __future__ import annotations

from collections.abc import Iterator

from runtime.issues import Issue, error
from runtime.kv_tiers import HostTier, StorageTier
from runtime.memory import GIB, gib, host_memory_per_node, memory_fit
from runtime.rules.context import RuleContext

# Of a node's host memory, what the host tiers of its GPUs may pin: the rest is the OS's, the
# engine's own (tokenizer, scheduler, weight loading) and the kubelet's reserve.
HOST_TIER_NODE_SHARE = 0.8
# Storage backends SGLang 0.5.23 names that Plinth cannot set up, and what each would need.
_UNPLACED_BACKENDS = {
    "hf3fs": "a 3FS client mount and its config file (SGLANG_HICACHE_HF3FS_CONFIG_PATH) per node",
    "nixl": "a NIXL agent and its storage plugin configured on every node",
    "aibrix": "an AIBrix KV cache service",
    "eic": "an EIC (Volcano Engine) KV service and its config file",
    "simm": "a SiMM memory service",
    "mori": "a MORI-IO service",
    "shm": "a shared-memory store outside the pod",
    "seaweedfs": "a SeaweedFS filer and its credentials",
}
_FIELD = "kv_cache.tiers"


def _host_rules(ctx: RuleContext, host: HostTier) -> Iterator[Issue]:
    field = f"{_FIELD}.host"
    if not ctx.spec.batching.radix_cache:
        yield error(
            "batching.radix_cache",
            "hicache_needs_radix_cache",
            "the HiCache host tier keeps the radix cache's evicted prefixes; with the radix "
            "cache off there is nothing to keep",
            "turn the radix cache on, or remove kv_cache.tiers.host",
        )
    if host.resolved_mem_layout == "page_first" and host.resolved_io_backend == "direct":
        yield error(
            f"{field}.mem_layout",
            "hicache_layout_backend",
            "SGLang's direct I/O backend cannot copy the page_first layout (it would switch to "
            "page_first_direct)",
            "use mem_layout page_first_direct, or io_backend kernel",
        )
    if host.resolved_mem_layout == "page_first_direct" and host.resolved_io_backend != "direct":
        yield error(
            f"{field}.io_backend",
            "hicache_layout_backend",
            "the page_first_direct layout is copied by the direct I/O backend only (SGLang "
            "would switch to it)",
            "use io_backend direct, or mem_layout page_first",
        )
    if ctx.spec.quantization.kv_cache_dtype.startswith("fp4"):
        yield error(
            "quantization.kv_cache_dtype",
            "hicache_kv_dtype",
            "an FP4 KV cache is not supported with HiCache in SGLang 0.5.23",
            "use an FP8 KV cache (fp8_e4m3), or remove kv_cache.tiers.host",
        )


def _storage_rules(ctx: RuleContext, storage: StorageTier) -> Iterator[Issue]:
    field = f"{_FIELD}.storage"
    host = ctx.spec.kv_cache.tiers.host
    if host is None:
        yield error(
            field,
            "hicache_storage_needs_host",
            "a storage tier sits behind the host tier: SGLang reads and writes it through "
            "host memory",
            "add kv_cache.tiers.host (e.g. ratio 2), or remove the storage tier",
        )
    elif host.resolved_mem_layout == "layer_first":
        yield error(
            f"{field.removesuffix('.storage')}.host.mem_layout",
            "hicache_storage_layout",
            "storage backends move whole pages; SGLang would switch layer_first to page_first",
            "use mem_layout page_first",
        )
    yield from _backend_needs(storage, field)


def _backend_needs(storage: StorageTier, field: str) -> Iterator[Issue]:
    if storage.backend in _UNPLACED_BACKENDS:
        yield error(
            f"{field}.backend",
            "hicache_backend_unplaced",
            f"the {storage.backend} backend needs {_UNPLACED_BACKENDS[storage.backend]}, "
            "which Plinth does not set up",
            "use backend file (node_path or claim) or mooncake (master_address, metadata_server)",
        )
        return
    if storage.backend == "file":
        if (storage.node_path is None) == (storage.claim is None):
            yield error(
                f"{field}.node_path",
                "hicache_file_location",
                "the file backend needs one place: a directory on the node or a claim",
                "set node_path (e.g. /mnt/nvme/hicache) or claim (a ReadWriteMany PVC), not both",
            )
        for name in ("master_address", "metadata_server", "device_name"):
            if getattr(storage, name) is not None:
                yield error(f"{field}.{name}", "hicache_field_unused",
                            f"{name} is a Mooncake setting; the file backend does not read it",
                            f"remove {name}")  # fmt: skip
        return
    # mooncake
    for name in ("master_address", "metadata_server"):
        if getattr(storage, name) is None:
            yield error(f"{field}.{name}", "hicache_mooncake_needs",
                        f"a Mooncake store is reached through its {name.replace('_', ' ')}",
                        f"set {name}")  # fmt: skip
    if storage.resolved_protocol == "rdma" and storage.device_name is None:
        yield error(
            f"{field}.device_name",
            "hicache_mooncake_needs",
            "Mooncake over RDMA needs the NIC to use",
            "set device_name (e.g. mlx5_0), or protocol tcp",
        )
    for name in ("node_path", "claim"):
        if getattr(storage, name) is not None:
            yield error(f"{field}.{name}", "hicache_field_unused",
                        f"{name} is a file-backend setting; Mooncake keeps pages in its store",
                        f"remove {name}")  # fmt: skip


def _host_fit(ctx: RuleContext, host: HostTier) -> Iterator[Issue]:
    if ctx.arch is None:
        return
    budget = ctx.gpu.node_host_memory_gib * GIB * HOST_TIER_NODE_SHARE
    field = f"{_FIELD}.host.{'size_gb' if host.size_gb is not None else 'ratio'}"
    for group in ctx.groups:
        fit = memory_fit(ctx.spec, ctx.gpu, ctx.arch, group)
        per_node = host_memory_per_node(fit, group)
        if per_node > budget:
            yield error(
                field,
                "hicache_host_memory",
                f"the host tier pins {gib(fit.host_tier)} GiB per GPU, {gib(per_node)} GiB per "
                f"node of {group.gpus_per_node} GPUs, more than {int(HOST_TIER_NODE_SHARE * 100)}% "
                f"of a {ctx.gpu.id} node's {ctx.gpu.node_host_memory_gib:g} GiB",
                f"lower it to at most {gib(budget / group.gpus_per_node)} GiB per GPU",
            )
            return
        if fit.kv_cache > 0 and fit.host_tier <= fit.kv_cache:
            yield error(
                field,
                "hicache_host_smaller",
                f"the host tier ({gib(fit.host_tier)} GiB per GPU) is no larger than the GPU's KV "
                f"pool ({gib(fit.kv_cache)} GiB): SGLang refuses to start with it",
                f"give at least {int(fit.kv_cache / GIB) + 1} GiB, or a ratio above 1",
            )
            return


def kv_tiers(ctx: RuleContext) -> Iterator[Issue]:
    tiers = ctx.spec.kv_cache.tiers
    if tiers.host is not None:
        yield from _host_rules(ctx, tiers.host)
        yield from _host_fit(ctx, tiers.host)
    if tiers.storage is not None:
        yield from _storage_rules(ctx, tiers.storage)


RULES = (kv_tiers,)
