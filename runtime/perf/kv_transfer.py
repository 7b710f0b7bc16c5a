"""How long moving a request's KV cache from a prefill engine to a decode engine takes (P/D): the
one home of that arithmetic, which the simulator's transfers and the optimizer's split TTFT use.

A small pure model, kept apart from the step-time physics (``runtime.perf.step``): a transfer costs
a fixed per-transfer latency (the backend's handshake and completion notification) plus the KV
bytes over the link's effective bandwidth. The link is the GPU's scale-out NIC (one per GPU on
HGX/DGX boards), derated by what the ``--disaggregation-transfer-backend`` reaches on it (RDMA
engines such as Mooncake and NIXL come close to line rate; ``mooncake_tcp`` goes through the
kernel's TCP stack); ``fake`` moves nothing (SGLang uses it for decode-only benchmarks). The NIC
line rates and backend figures live in ``runtime/catalog/perf.yaml`` (``kv_transfer``) with their
sources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from runtime.catalog.perf import perf_catalog


class HasSm(Protocol):
    """A GPU as the simulator (``GpuShape``) or the optimizer (``GpuType``) holds it."""

    @property
    def sm(self) -> int: ...


@dataclass(frozen=True)
class TransferLink:
    backend: str
    bandwidth_gbs: float  # effective, 0 for the fake backend (nothing moves)
    latency_s: float

    def seconds(self, kv_bytes: float) -> float:
        """Simulated seconds to move ``kv_bytes`` of KV cache over this link."""
        if self.bandwidth_gbs <= 0:
            return 0.0
        return self.latency_s + kv_bytes / (self.bandwidth_gbs * 1e9)


def transfer_link(gpu: HasSm, backend: str | None) -> TransferLink:
    """The link a P/D pair on ``gpu`` uses with ``--disaggregation-transfer-backend``."""
    catalog = perf_catalog().kv_transfer
    name = backend or catalog.default_backend
    row = catalog.backend(name)  # SGLang rejects unknown names; here they get the default's figures
    return TransferLink(name, catalog.nic_gbs(gpu.sm) * row.efficiency, row.latency_us * 1e-6)
