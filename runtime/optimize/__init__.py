"""The optimizer: which RuntimeSpec serves a traffic profile cheapest within its SLOs.

One physics: every step time comes from ``runtime.perf`` (the simulator's model), every memory
figure from ``runtime.memory`` (the validator's), and every returned candidate is a RuntimeSpec
that ``runtime.validate`` passes without errors.

The search is analytic, not simulated. For each *engine shape* (GPU x TP x weight quantization x
KV-cache dtype x speculator) it finds, by bisection on the arrival rate, the most requests per
second one replica carries within the SLOs (its *capacity*): decode runs at the concurrency
Little's law gives, prefill steals engine time in an aggregated engine (and its chunks lengthen
the inter-token gaps they ride along), and queueing in front of prefill follows an M/D/1 wait.
Replicas then follow from the load, so replica counts are never enumerated. Disaggregated
layouts combine a prefill-only shape with a decode-only shape of the same GPU and formats, each
side's capacity computed once, so P/D adds no product of searches. Pruning: a shape whose weights
do not fit, or whose spec fails validation, is dropped before any rate is tried; a TP wider than
the GPUs of one node, or one SGLang's head rule refuses for the attention or KV heads
(``runtime.rules.parallel.working_tps``), is never built.

Two objectives. ``cost`` (the default) sizes every layout to carry the traffic's rate and picks
the cheapest. ``throughput`` is the question AIConfigurator answers: given a GPU budget (the
limits, the free GPUs, or one node), which layout serves the most output tokens/s per GPU within
the SLOs; every layout is then sized to the budget and loaded to its capacity, and a P/D
layout's prefill:decode pool sizes are the integer split of the budget that wastes least.

MoE models add two knobs per TP: attention data parallelism (SGLang ``--enable-dp-attention``,
``parallelism.attn_dp``: attention ranks of TP/DP GPUs, each with its own sequences and KV cache)
and the experts' layout (``parallelism.ep`` = TP, whole experts per GPU, or 1, each expert sliced
over the TP GPUs); the physics prices each (``runtime.perf.step``, calibrated to AIConfigurator's
SGLang MoE data).

Multi-turn history counts as cached only while the conversations in progress (the rate times a
turn's predicted time) fit in a replica's KV pool; past that, LRU evicts each history before its
next turn and only the shared prefix hits. A traffic's prefix working set (distinct documents or
system prompts) past the pool keeps only the pool's share of the shared prefix. Either way a shape
with a HiCache host tier (``runtime.kv_tiers``) is a candidate too: what the host keeps is loaded
back over the host link (``runtime.perf.kv_tiers``) instead of recomputed. A speculative engine's
ITL p90 is a step over the accept length of a bad step (its 10th percentile), not over the mean.

What the model leaves out (documented, not hidden): prefix-cache hits follow the traffic's
shared-prefix share and multi-turn depth, not a simulated radix tree; round-robin routing keeps
the shared prefix (every replica caches it) but loses multi-turn history; the KV transfer of a
disaggregated request is one uncontended transfer (the GPU's NIC at the default backend's share of
line rate, ``runtime/catalog/perf.yaml``), with no queueing behind other transfers. A split
carries the smaller of its pools' capacities and pays for both (its reasons name the idle share),
and ranks ``PD_RANKING_MARGIN`` worse than predicted, so it is chosen only where it beats the
best aggregated layout by more than the model's error on splits. ``bench/optimizer.py`` holds
this model's picks against AIConfigurator's; ``predict_layout`` prices a layout chosen elsewhere.

The package, by seam: ``types`` (the request and answer), ``shapes`` (engine shapes, built and
pruned), ``queueing`` (one shape's capacity and latencies, which ``runtime.capacity`` and
``runtime.confirm`` use too), ``search`` (pricing layouts and their specs), ``rank`` (the
objective's order, the pick, the Pareto front and the waterfall),
``predict`` (pricing a layout chosen elsewhere) and ``output`` (plain data for the API).
"""

from __future__ import annotations

from runtime.optimize.output import candidate_dict, result_dict
from runtime.optimize.predict import predict_layout, predict_load
from runtime.optimize.rank import optimize
from runtime.optimize.types import (
    KEPT_WARNINGS,
    PD_RANKING_MARGIN,
    WATERFALL,
    Candidate,
    Feature,
    Layout,
    Limits,
    Objective,
    OptimizeError,
    OptimizeRequest,
    OptimizeResult,
    Prediction,
    Slo,
    Traffic,
    WaterfallStep,
)

__all__ = [
    "KEPT_WARNINGS",
    "PD_RANKING_MARGIN",
    "WATERFALL",
    "Candidate",
    "Feature",
    "Layout",
    "Limits",
    "Objective",
    "OptimizeError",
    "OptimizeRequest",
    "OptimizeResult",
    "Prediction",
    "Slo",
    "Traffic",
    "WaterfallStep",
    "candidate_dict",
    "optimize",
    "predict_layout",
    "predict_load",
    "result_dict",
]
