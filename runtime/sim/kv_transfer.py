"""How long moving a request's KV cache from a prefill engine to a decode engine takes (P/D).

A small pure model, kept apart from the step-time physics (``roofline``): a transfer costs a fixed
per-transfer latency (the backend's handshake and completion notification) plus the KV bytes over
the link's effective bandwidth. The link is the GPU's scale-out NIC (one per GPU on HGX/DGX boards:
ConnectX-6 HDR 200 Gb/s with A100, ConnectX-7 NDR 400 Gb/s with H100/H200, ConnectX-8 800 Gb/s with
Blackwell, per NVIDIA's DGX A100/H100/B200 user guides), derated by what the transfer backend
reaches on it (RDMA engines such as Mooncake and NIXL come close to line rate; ``mooncake_tcp``
goes through the kernel's TCP stack). ``fake`` moves nothing: SGLang uses it for decode-only
benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.sim.hardware import GpuShape

# Scale-out NIC line rate per GPU, GB/s (10^9 bytes/s), by compute-capability generation.
NIC_GBS_BY_GENERATION = {8: 25.0, 9: 50.0, 10: 100.0, 12: 50.0}
DEFAULT_NIC_GBS = 25.0
# (share of line rate reached, fixed latency per transfer in seconds) by transfer backend.
BACKENDS: dict[str, tuple[float, float]] = {
    "mooncake": (0.85, 0.0005),
    "nixl": (0.85, 0.0005),
    "mori": (0.80, 0.0005),
    "ascend": (0.70, 0.001),
    "mooncake_tcp": (0.35, 0.002),
    "fake": (0.0, 0.0),
}
DEFAULT_BACKEND = "mooncake"


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


def transfer_link(gpu: GpuShape, backend: str | None) -> TransferLink:
    """The link a P/D pair on ``gpu`` uses with ``--disaggregation-transfer-backend``."""
    name = backend or DEFAULT_BACKEND
    efficiency, latency = BACKENDS.get(name, BACKENDS[DEFAULT_BACKEND])
    nic = NIC_GBS_BY_GENERATION.get(gpu.sm // 10, DEFAULT_NIC_GBS)
    return TransferLink(name, nic * efficiency, latency)
