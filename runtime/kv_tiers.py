"""HiCache's settings (`kv_cache.tiers` of a RuntimeSpec): SGLang's hierarchical KV cache, a host
memory tier under the GPU's KV pool and an optional storage tier behind it.

Parsed one field at a time, as every spec group; what relates them to each other, to the hardware
and to the node's memory is `runtime.rules.kv_tiers`'s.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from runtime.spec_base import IbDevices, SpecGroup

PositiveInt = Annotated[int, Field(ge=1)]
_PATH_PART = r"[A-Za-z0-9_][A-Za-z0-9._-]*"

# HiCache (SGLang's hierarchical KV cache), spelled as SGLang 0.5.23's flags take them; each
# choice list is checked against the flag catalogue by tests/runtime/test_kv_tiers.py.
# `kernel_ascend` is Ascend-NPU only, so it is not offered on NVIDIA GPUs.
HiCacheWritePolicy = Literal["write_through", "write_through_selective", "write_back"]
HiCacheIoBackend = Literal["kernel", "direct"]
HiCacheMemLayout = Literal[
    "layer_first", "page_first", "page_first_direct", "page_first_kv_split", "page_head"
]  # fmt: skip
HiCachePrefetchPolicy = Literal["best_effort", "wait_complete", "timeout"]
# The storage backends Plinth can place: `file` (a directory on the node or in a claim) and
# `mooncake` (a Mooncake store: its master and metadata server). SGLang 0.5.23 names more
# (hf3fs needs a 3FS client config file on every node, nixl/aibrix/eic their own services):
# runtime.rules.kv_tiers says so when asked for one of them.
HiCacheStorageBackend = Literal[
    "file", "mooncake", "hf3fs", "nixl", "aibrix", "eic", "simm", "mori", "shm", "seaweedfs"
]  # fmt: skip
# A Kubernetes object name (a PersistentVolumeClaim), RFC 1123.
_CLAIM_NAME = re.compile(r"[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?")
# An absolute node path of plain parts (no '..', no spaces).
_NODE_PATH = re.compile(rf"(?:/{_PATH_PART})+")
# host:port, or a URL, for Mooncake's services.
_SERVICE_ADDRESS = re.compile(
    r"(?:[a-z][a-z0-9+.-]*://)?[A-Za-z0-9_.-]+(?::\d{1,5})?(?:/[\w./-]*)?"
)


def _claim_name(value: str) -> str:
    if _CLAIM_NAME.fullmatch(value):
        return value
    raise PydanticCustomError(
        "invalid_claim",
        "'{value}' is not a PersistentVolumeClaim name",
        {"value": value, "fix": "use lower-case letters, digits, '-' and '.'"},
    )


def _node_path(value: str) -> str:
    if _NODE_PATH.fullmatch(value) and "/../" not in value + "/" and value != "/":
        return value
    raise PydanticCustomError(
        "invalid_node_path",
        "'{value}' is not an absolute directory path on the node",
        {"value": value, "fix": "e.g. /mnt/nvme/hicache"},
    )


def _service_address(value: str) -> str:
    if _SERVICE_ADDRESS.fullmatch(value):
        return value
    raise PydanticCustomError(
        "invalid_address",
        "'{value}' is not a host:port or URL",
        {"value": value, "fix": "e.g. mooncake-master:50051 or http://mooncake-meta:8080/metadata"},
    )


class HostTier(SpecGroup):
    """HiCache's host-memory tier (`--enable-hierarchical-cache`): prefixes the GPU's KV pool
    evicts stay in pinned host memory and load back over the host link instead of being
    recomputed. Size by `ratio` (of the GPU KV pool, SGLang's `--hicache-ratio`) or `size_gb`
    (per GPU, `--hicache-size`, which wins); neither set: ratio 2, SGLang's usual default."""

    ratio: float | None = Field(
        default=None, gt=1, description="host tier size as a multiple of the GPU KV pool (> 1)"
    )
    # GB (10^9 bytes), as SGLang reads --hicache-size.
    size_gb: PositiveInt | None = Field(
        default=None, description="host tier GB per GPU; overrides ratio"
    )
    # None: SGLang 0.5.23's default (the flag catalogue's), which Plinth spells out in the argv.
    write_policy: HiCacheWritePolicy | None = None
    io_backend: HiCacheIoBackend | None = None
    mem_layout: HiCacheMemLayout | None = None

    @property
    def resolved_ratio(self) -> float:
        return self.ratio if self.ratio is not None else DEFAULT_HICACHE_RATIO

    @property
    def resolved_write_policy(self) -> HiCacheWritePolicy:
        return self.write_policy or "write_through"

    @property
    def resolved_io_backend(self) -> HiCacheIoBackend:
        return self.io_backend or "kernel"

    @property
    def resolved_mem_layout(self) -> HiCacheMemLayout:
        return self.mem_layout or "page_first"


DEFAULT_HICACHE_RATIO = 2.0


class StorageTier(SpecGroup):
    """HiCache's storage tier behind the host tier (`--hicache-storage-backend`).

    `file`: a directory on each node (`node_path`) or a PersistentVolumeClaim (`claim`, shared by
    the replicas: ReadWriteMany). `mooncake`: a Mooncake store, which needs its master
    (`master_address`) and its metadata server (`metadata_server`); RDMA (`protocol: rdma`) also
    needs the NIC (`device_name`). `bandwidth_gbs`: what one replica reads from it, for the
    simulator and the optimizer (default: the backend's typical figure, `runtime.perf.kv_tiers`).
    """

    backend: HiCacheStorageBackend
    prefetch_policy: HiCachePrefetchPolicy | None = Field(
        default=None, description="default: timeout, as SGLang's"
    )
    node_path: Annotated[str, AfterValidator(_node_path)] | None = None
    claim: Annotated[str, AfterValidator(_claim_name)] | None = None
    master_address: Annotated[str, AfterValidator(_service_address)] | None = None
    metadata_server: Annotated[str, AfterValidator(_service_address)] | None = None
    protocol: Literal["rdma", "tcp"] | None = Field(default=None, description="default: rdma")
    device_name: IbDevices | None = None
    bandwidth_gbs: float | None = Field(default=None, gt=0, description="read GB/s per replica")

    @property
    def resolved_prefetch_policy(self) -> HiCachePrefetchPolicy:
        return self.prefetch_policy or "timeout"

    @property
    def resolved_protocol(self) -> Literal["rdma", "tcp"]:
        return self.protocol or "rdma"


class KvTiers(SpecGroup):
    host: HostTier | None = None
    storage: StorageTier | None = None


class KvCacheSettings(SpecGroup):
    """Where KV cache lives beyond the GPU: `tiers.host` (HiCache) and `tiers.storage`."""

    tiers: KvTiers = KvTiers()

    @property
    def hicache(self) -> bool:
        return self.tiers.host is not None
