"""Time to first token after a scale from zero, per faster-start option, beside the baseline in
the same run (issue 29 item 6).

Each option starts a new simulated engine (``runtime.sim`` with ``--sim-cold-start 1``: its start
phases take their modelled time from the model's size and ``runtime/catalog/startup.yaml``) and
sends one chat request the moment it can be served, as a request held through a scale from zero
is. The figure is simulated seconds, like every simulated latency: the engine's start as it
reports it (``sglang:startup_time_seconds{phase="total"}``, the sum of its phases) plus that
request's own TTFT (``sglang:time_to_first_token_seconds``). What a cluster adds before the
engine runs (scheduling, the image pull) is the same for every option but the warm pool and is
left out. The options:

- baseline: weights fetched from the hub on a cold node, SGLang's default CUDA graph batch
  sizes (up to 256 on an 80 GB GPU);
- prestaged: the weights already in the node's cache (``autoscaling.prestage_weights``);
- trimmed graphs: decode graphs up to twice the concurrency target of 8
  (``batching.cuda_graph_trim`` -> ``--cuda-graph-max-bs-decode 16``);
- prestaged + trimmed;
- warm pool: a replica started earlier and released (``/release_memory_occupation``), woken by
  ``/resume_memory_occupation`` (the local driver calls it in the pass the wake starts);
- warm pool on Kubernetes: the same resume, reached through the pod's annotation
  (``deployments/drivers/kube/warm.py``): the agent's poll (``runtime.warm_agent.POLL_S``) and
  the kubelet's probe of its ``/ready`` (``READY_PROBE_PERIOD_S``) added at their bounds, which
  are Plinth's own settings. Not modelled: how soon the kubelet rewrites the downward API file
  after the annotation changes. It does so when it syncs the pod after the update (under a
  second on an idle node, by the kubelet's design), else at its periodic sync (``syncFrequency``,
  1 min by default); kwok, the only cluster the tests have, runs no kubelet to measure it, so
  the row is a lower bound and the printed worst case adds that minute. The router sees the pod
  ready by its watch (no period).

    .venv/bin/python bench/cold_start.py [--time-scale 200]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from runtime.sim.launcher import ManagedProcess, http_get, start_engine  # noqa: E402
from runtime.warm_agent import POLL_S, READY_PROBE_PERIOD_S  # noqa: E402

MODELS = (
    ("meta-llama/Llama-3.1-8B-Instruct", 1),
    ("meta-llama/Llama-3.1-70B-Instruct", 4),
)
CONCURRENCY_TARGET = 8
TRIMMED = ["--cuda-graph-max-bs-decode", str(2 * CONCURRENCY_TARGET)]
# What Kubernetes adds to a warm pool's resume (see the docstring): Plinth's own bounds, and the
# kubelet's periodic sync, the worst case for the annotation reaching the pod.
KUBE_WAKE_S = POLL_S + READY_PROBE_PERIOD_S
KUBELET_SYNC_S = 60.0


def _post(url: str, body: dict[str, object] | None = None) -> dict[str, object]:
    data = json.dumps(body or {}).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return dict(json.loads(response.read()))


def _metric(engine: ManagedProcess, name: str, **labels: str) -> float:
    body = http_get(f"{engine.url}/metrics")[1].decode()
    total = 0.0
    for line in body.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _first_token(engine: ManagedProcess, model: str) -> float:
    """One chat request; its TTFT in simulated seconds as the engine counted it."""
    messages = [{"role": "user", "content": "Say hello."}]
    _post(
        f"{engine.url}/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": 8}
    )
    return _metric(engine, "sglang:time_to_first_token_seconds_sum")


def _args(model: str, tp: int, cache: Path, *extra: str) -> list[str]:
    return ["--sim-cold-start", "1", "--tp-size", str(tp), "--download-dir", str(cache), *extra]


def cold(model: str, tp: int, scale: float, cache: Path, *extra: str) -> tuple[float, float]:
    """(simulated TTFT after the start, real seconds) of a new engine."""
    began = time.monotonic()
    engine = start_engine(model=model, args=_args(model, tp, cache, *extra), time_scale=scale,
                          timeout=600)  # fmt: skip
    try:
        started = _metric(engine, "sglang:startup_time_seconds", phase="total")
        ttft = _first_token(engine, model)
        return started + ttft, time.monotonic() - began
    finally:
        engine.stop()


def warm(model: str, tp: int, scale: float, cache: Path) -> tuple[float, float]:
    """(simulated TTFT after the wake, real seconds) of a released replica resumed."""
    engine = start_engine(model=model, args=_args(model, tp, cache, *TRIMMED), time_scale=scale,
                          timeout=600)  # fmt: skip
    try:
        _post(f"{engine.url}/release_memory_occupation")
        began = time.monotonic()
        resumed = float(str(_post(f"{engine.url}/resume_memory_occupation")["seconds"]))
        ttft = _first_token(engine, model)
        return resumed + ttft, time.monotonic() - began
    finally:
        engine.stop()


def prestaged_cache(model: str, tp: int, scale: float) -> Path:
    """A node cache holding the model's weights (one start fills it, as pre-staging would)."""
    cache = Path(tempfile.mkdtemp(prefix="plinth-prestaged-"))
    cold(model, tp, scale, cache)
    return cache


Run = Callable[[], tuple[float, float]]


def _options(model: str, tp: int, scale: float, staged: Path) -> list[tuple[str, Run]]:
    def fresh() -> Path:
        return Path(tempfile.mkdtemp(prefix="plinth-cold-"))

    return [
        ("baseline", lambda: cold(model, tp, scale, fresh())),
        ("prestaged", lambda: cold(model, tp, scale, staged)),
        ("trimmed graphs", lambda: cold(model, tp, scale, fresh(), *TRIMMED)),
        ("prestaged + trimmed", lambda: cold(model, tp, scale, staged, *TRIMMED)),
        ("warm pool (resume)", lambda: warm(model, tp, scale, staged)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--time-scale", type=float, default=200.0)
    scale = parser.parse_args().time_scale
    print(f"TTFT after a scale from zero, simulated seconds (time scale {scale:g}); H100-SXM")
    header = f"{'model':<36} {'option':<24} {'TTFT s':>9} {'vs base':>8} {'real s':>7}"
    print(header)
    print("-" * len(header))
    for model, tp in MODELS:
        staged = prestaged_cache(model, tp, scale)
        options = _options(model, tp, scale, staged)
        base = None
        for name, run in options:
            simulated, real = run()
            base = base or simulated
            name_tp = f"{model.split('/')[-1]} tp{tp}"
            print(
                f"{name_tp:<36} {name:<24} {simulated:>9.1f} {base / simulated:>7.1f}x {real:>7.1f}"
            )
            if name.startswith("warm pool"):
                kube = simulated + KUBE_WAKE_S
                worst = f"  (worst {kube + KUBELET_SYNC_S:.1f})"
                print(f"{name_tp:<36} {'warm pool, Kubernetes':<24} {kube:>9.1f} "
                      f"{base / kube:>7.1f}x {'':>7}{worst}")  # fmt: skip
    print("real s: wall time of the run, the simulator's process start included (not a figure)")
    print("warm pool, Kubernetes: a lower bound; worst: the kubelet's periodic sync (1 min) "
          "before the annotation reaches the pod")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
