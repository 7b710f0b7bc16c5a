"""How long moving KV pages between HiCache's tiers takes: the one home of that arithmetic, which
the simulator's host and storage tiers and the optimizer's HiCache estimate use.

Three links. GPU <-> host memory is the GPU's host link (PCIe, or NVLink-C2C on Grace boards;
`host_link_gbs` in runtime/catalog/gpus.yaml, with its source), of which pinned copies reach
`HOST_LINK_EFFICIENCY`. Host <-> storage is the storage backend's read rate: a node's NVMe
directory for `file`, the scale-out NIC for a Mooncake store (the same NIC P/D transfers use,
`runtime/catalog/perf.yaml`), unless the spec gives `bandwidth_gbs`.

How a step pays for them (SGLang's HiCache controller): loads from host run on their own CUDA
stream, layer by layer ahead of the attention that needs them, so a step takes the longer of its
compute and its loads; write-through copies to host are asynchronous too. Write-back copies a
node when it is evicted, which the allocation that evicted it waits for: serial. Pages from
storage are prefetched into host memory while the request waits in the queue (``timeout`` and
``wait_complete`` policies wait for them), one read at a time over the storage link, beside the
GPU's work (``runtime.sim.hicache``); a storage hit found at admission after all (its pages
dropped from the host meanwhile) is read in the step, serially.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runtime.catalog.perf import perf_catalog

# Pinned-memory copies reach about 80% of the link's raw one-way rate (NVIDIA's bandwidthTest:
# ~25 of 32 GB/s on PCIe Gen4 x16, ~50-55 of 64 on Gen5).
HOST_LINK_EFFICIENCY = 0.8
# One datacenter NVMe SSD (PCIe Gen4 x4, ~7 GB/s sequential read on its datasheet) through a
# filesystem with SGLang's one-file-per-page layout: about half of that. An assumption, stated.
FILE_STORAGE_GBS = 3.5


class HasHostLink(Protocol):
    @property
    def sm(self) -> int: ...

    @property
    def host_link_gbs(self) -> float: ...


@dataclass(frozen=True)
class TierLinks:
    """Effective GB/s (10^9 bytes/s) of the host link and of the storage tier's reads."""

    host_gbs: float
    storage_gbs: float = 0.0

    def host_seconds(self, nbytes: float) -> float:
        return nbytes / (self.host_gbs * 1e9) if nbytes > 0 else 0.0

    def storage_seconds(self, nbytes: float) -> float:
        if nbytes <= 0 or self.storage_gbs <= 0:
            return 0.0
        return nbytes / (self.storage_gbs * 1e9)


@dataclass
class TierTraffic:
    """KV bytes one engine step moves between tiers."""

    host_load: float = 0.0  # host -> GPU (overlapped with compute), one GPU's bytes
    storage_load: float = 0.0  # storage -> host (prefetched before the step), all GPUs' bytes
    write_through: float = 0.0  # GPU -> host, asynchronous
    write_back: float = 0.0  # GPU -> host at eviction, waited for

    @property
    def empty(self) -> bool:
        return not (self.host_load or self.storage_load or self.write_through or self.write_back)


def step_seconds(compute_s: float, traffic: TierTraffic, links: TierLinks) -> float:
    """One step's duration with its tier traffic (module docstring: what overlaps what)."""
    overlapped = links.host_seconds(traffic.host_load + traffic.write_through)
    serial = links.host_seconds(traffic.write_back) + links.storage_seconds(traffic.storage_load)
    return max(compute_s, overlapped) + serial


def storage_gbs(gpu: HasHostLink, backend: str | None, override: float | None = None) -> float:
    """Read GB/s of a storage tier: the spec's figure, else the backend's typical one."""
    if override is not None:
        return override
    if backend is None:
        return 0.0
    if backend == "mooncake":
        catalog = perf_catalog().kv_transfer
        return catalog.nic_gbs(gpu.sm) * catalog.backend("mooncake").efficiency
    return FILE_STORAGE_GBS


def tier_links(
    gpu: HasHostLink, storage_backend: str | None = None, storage_override: float | None = None
) -> TierLinks:
    """The links of an engine on ``gpu`` with an optional storage tier."""
    return TierLinks(
        host_gbs=gpu.host_link_gbs * HOST_LINK_EFFICIENCY,
        storage_gbs=storage_gbs(gpu, storage_backend, storage_override),
    )
