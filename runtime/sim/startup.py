"""The simulated engine's cold start: how long each of SGLang's start phases takes, and the lines
SGLang logs for them.

Times come from the model's size and the catalogue's figures (``runtime/catalog/startup.yaml``):

- weights downloaded: the checkpoint's bytes over the hub download speed, unless the node's
  cache (``--download-dir``) already holds them (a marker the first download leaves there, which
  pre-staging writes too); then nothing is fetched.
- weights loaded: each GPU's share of the weights read from the cache (NVMe) and copied over the
  host link (the slower of the two sets the pace).
- CUDA graphs captured: one decode graph per captured batch size, per layer; the sizes are
  SGLang's default list up to ``--cuda-graph-max-bs-decode`` (by GPU memory and TP, capped at
  ``--max-running-requests``), or exactly ``--cuda-graph-bs-decode``; none with
  ``--disable-decode-cuda-graph``.
- warm-up: a fixed cost, none with ``--skip-server-warmup``.

The figures are simulated seconds. The engine waits each out at ``--time-scale`` (a phase of 40
simulated seconds takes 0.4 s at a time scale of 100), logs SGLang's lines with the simulated
figure, and stamps them on its simulated clock (the start's wall time plus the simulated seconds
so far), so a reader of its log (``runtime.startup.engine_phases``) gets simulated seconds for
every phase. With ``--sim-cold-start 0`` (the default, so tests start at once) every phase takes
no time and the same lines are logged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from runtime.catalog.startup import startup_figures
from runtime.memory import default_cuda_graph_bs
from runtime.perf.hardware import GpuShape, ModelShape
from runtime.sim.args import EngineArgs
from runtime.sim.memory import model_weight_bytes

GB = 1e9
# Where the simulated download leaves its marker, under --download-dir (SGLang's flag for the
# weights cache directory): the same marker pre-staging writes.
MARKER_DIR = "plinth-sim"


def _default_sizes() -> list[int]:
    return [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 513, 16)]


def captured_batch_sizes(args: EngineArgs, gpu: GpuShape, max_running: int) -> list[int]:
    """The decode batch sizes SGLang captures a CUDA graph for."""
    if args.disable_decode_cuda_graph:
        return []
    if args.cuda_graph_bs_decode:
        return sorted(set(args.cuda_graph_bs_decode))
    max_bs = args.cuda_graph_max_bs_decode
    if max_bs is None:
        max_bs = min(default_cuda_graph_bs(gpu.memory_gib, args.tp_size), max_running)
    return [bs for bs in _default_sizes() if bs <= max_bs] or [1]


def weights_marker(download_dir: str, model: ModelShape) -> Path:
    return Path(download_dir) / MARKER_DIR / model.id.replace("/", "--")


@dataclass(frozen=True)
class StartPlan:
    """Simulated seconds per start phase, and what they were computed from."""

    download_s: float
    load_s: float
    graphs_s: float
    warmup_s: float
    graph_count: int
    checkpoint_gb: float

    @property
    def total_s(self) -> float:
        return self.download_s + self.load_s + self.graphs_s + self.warmup_s


def plan_start(args: EngineArgs, gpu: GpuShape, model: ModelShape, max_running: int) -> StartPlan:
    """The phases' times for this engine (all zero unless ``--sim-cold-start``)."""
    figures = startup_figures()
    # The GPU's own host link where the GPU catalogue has one, else the node figure.
    host_link_gbs = getattr(gpu, "host_link_gbs", None) or figures.host_link_gbs
    sizes = captured_batch_sizes(args, gpu, max_running)
    checkpoint = model.weight_bytes(model.checkpoint_bytes_per_param)
    if not args.sim.cold_start:
        return StartPlan(0.0, 0.0, 0.0, 0.0, len(sizes), checkpoint / GB)
    cached = args.download_dir is None or weights_marker(args.download_dir, model).exists()
    download = 0.0 if cached else checkpoint / GB / figures.hub_download_gbs
    per_gpu = model_weight_bytes(args, model) / (args.tp_size * args.pp_size) / GB
    load = per_gpu / min(figures.cache_read_gbs, host_link_gbs)
    layers = math.ceil(model.num_layers / args.pp_size)
    graphs = len(sizes) * layers * figures.graph_capture_s_per_layer
    warmup = 0.0 if args.skip_server_warmup else figures.warmup_s
    return StartPlan(download, load, graphs, warmup, len(sizes), checkpoint / GB)


def resume_seconds(args: EngineArgs, gpu: GpuShape, model: ModelShape) -> float:
    """Simulated seconds of ``/resume_memory_occupation``: each GPU's weights copied back from
    host memory over the host link (the KV pool is only re-mapped, CUDA graphs are kept: SGLang's
    memory saver keeps their virtual addresses). Zero unless ``--sim-cold-start``."""
    if not args.sim.cold_start:
        return 0.0
    host_link_gbs = getattr(gpu, "host_link_gbs", None) or startup_figures().host_link_gbs
    per_gpu = model_weight_bytes(args, model) / (args.tp_size * args.pp_size) / GB
    return per_gpu / host_link_gbs


def leave_marker(args: EngineArgs, model: ModelShape) -> None:
    """A finished download leaves its marker, so the next start on this node finds the weights."""
    if args.download_dir is None:
        return
    marker = weights_marker(args.download_dir, model)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def fetch_line(plan: StartPlan, files: int = 4) -> str:
    """huggingface_hub's finished download bar, as it draws it (elapsed as [mm:ss<...])."""
    seconds = round(plan.download_s)
    return (
        f"Fetching {files} files: 100%|##########| {files}/{files} "
        f"[{seconds // 60:02d}:{seconds % 60:02d}<00:00, {plan.checkpoint_gb:.1f}GB]"
    )
