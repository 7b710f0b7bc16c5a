"""How long the optimizer's full search takes, next to a search that validates every layout.

``runtime.optimize`` validates each engine shape once and only the layouts it returns; the peer,
measured in the same run, builds and validates a RuntimeSpec for every layout the search
evaluated (what a search without that pruning pays before it has computed a single figure).
Target (issue 16): the full search under 2 s on 2 cores, all catalogue GPUs.

The comparison with AIConfigurator's picks (issue 16 item 4, ``bench/optimizer.py``) is not
here: it needs the calibration bench's AIConfigurator venv.

    .venv/bin/python bench/optimizer_search.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runtime import optimize as opt
from runtime.optimize import search, shapes, types
from runtime.validate import validate

CASES = [
    ("llama-3.1-8b", opt.Traffic(1024, 256, rate_rps=20), opt.Slo(1.0, 0.05)),
    ("llama-3.1-70b", opt.Traffic(4000, 300, rate_rps=5, turns=3), opt.Slo(1.5, 0.03)),
    ("qwen3-32b", opt.Traffic(2048, 512, rate_rps=8, prefix_share=0.3), opt.Slo(1.0, 0.04)),
    ("qwen3-235b-a22b", opt.Traffic(1024, 256, rate_rps=4), opt.Slo(2.0, 0.05)),
    ("deepseek-v3", opt.Traffic(2048, 512, rate_rps=2), opt.Slo(3.0, 0.08)),
    ("llama-3.1-8b", opt.Traffic(8000, 200, rate_rps=10), opt.Slo(2.0, 0.02)),
]


def _peer_seconds(request: opt.OptimizeRequest) -> float:
    """Validate a spec for every layout the search evaluated (no pruning)."""
    arch = types.resolve_model(request)
    gpus = types.resolve_gpus(request)
    rate = request.traffic.arrival_rate(request.slo)
    start = time.perf_counter()
    built = list(shapes.engine_shapes(request, arch, gpus))
    for config in search.price_layouts(request, built, rate):
        validate(search.to_spec(request, arch, config))
    return time.perf_counter() - start


def main() -> None:
    print(f"{'model':18} {'pick':48} {'$/h':>8} {'layouts':>8} {'search s':>9} {'peer s':>8}")
    for model, traffic, slo in CASES:
        request = opt.OptimizeRequest(model=model, traffic=traffic, slo=slo)
        start = time.perf_counter()
        result = opt.optimize(request)
        seconds = time.perf_counter() - start
        peer = _peer_seconds(request)
        pick = result.best.label if result.best else "(none meets the SLOs)"
        cost = f"{result.best.prediction.cost_per_hour:.2f}" if result.best else "-"
        print(f"{model:18} {pick:48} {cost:>8} {result.evaluated:8d} {seconds:9.2f} {peer:8.2f}")


if __name__ == "__main__":
    main()
