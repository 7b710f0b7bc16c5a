"""The simulator's figures on an idle and on a loaded host, side by side (not a test).

The same workload runs against a fresh simulated engine four times: real-time clock and fast clock
(``--sim-clock``), each on an idle host and with busy-loop processes (two per CPU) hogging every
core. Figures are in simulated time, read from the engine (``meta_info.e2e_latency`` and
``/server_info``'s ``sim_clock``), so they should not move with host load; wall seconds show what
the fast clock saves. Workload: a single stream (Llama-3.1-8B on one H100, 512-token prompt, 256
output tokens: the issue's no-speculator case), then one batch of 32 such requests submitted at
once, then 8 closed-loop clients sending 4 requests each. Real arrivals of closed-loop requests
depend on when the host runs the clients; the realtime clock takes them as they come (so batches
form differently on a loaded host), the fast clock holds simulated time until a finished request's
client is back (``runtime.sim.clock``'s arrival barrier), so its figures should match to the
rounding. The fast clock's wall seconds include the barrier's wait for clients that do not come
back (half a second each time the last requests of some clients finish). Printed: single-stream
tok/s, batch tok/s (all output tokens over the batch's makespan), mean e2e latency of the batch
and of the closed-loop requests, the clock's re-anchored real seconds, and wall seconds.

Run: ``python bench/sim_clock.py`` (about a minute at ``--time-scale 1``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runtime.sim.launcher import start_engine

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass
class Figures:
    mode: str
    host: str
    single_tok_s: float
    batch_tok_s: float
    batch_mean_e2e: float
    loop_mean_e2e: float
    reanchored_s: float
    wall_s: float


def _burn() -> None:
    while True:
        pass


def _generate(url: str, texts: list[str], max_new: int) -> list[dict[str, Any]]:
    body = {
        "text": texts if len(texts) > 1 else texts[0],
        "sampling_params": {"max_new_tokens": max_new, "ignore_eos": True},
    }
    response = httpx.post(f"{url}/generate", json=body, timeout=600)
    response.raise_for_status()
    out = response.json()
    return out if isinstance(out, list) else [out]


def run(mode: str, loaded: bool, args: argparse.Namespace) -> Figures:
    burners: list[multiprocessing.Process] = []
    if loaded:
        for _ in range(2 * (os.cpu_count() or 1)):
            proc = multiprocessing.Process(target=_burn, daemon=True)
            proc.start()
            burners.append(proc)
    engine = start_engine(
        model=MODEL,
        args=["--sim-clock", mode],
        time_scale=args.time_scale,
        timeout=120,
        log_dir=args.log_dir,
    )
    try:
        started = time.monotonic()
        prompt = "Describe the river that runs through the old city. " * 50  # ~512 tokens
        (single,) = _generate(engine.url, [prompt], args.output_len)
        meta = single["meta_info"]
        single_tok_s = float(meta["completion_tokens"]) / float(meta["e2e_latency"])
        texts = [f"Request {i}: " + prompt for i in range(args.batch)]
        batch = _generate(engine.url, texts, args.output_len)
        e2e = [float(r["meta_info"]["e2e_latency"]) for r in batch]
        tokens = sum(int(r["meta_info"]["completion_tokens"]) for r in batch)

        def client(index: int) -> list[float]:
            results = []
            for turn in range(4):
                (done,) = _generate(engine.url, [f"Client {index} turn {turn}. " + prompt], 128)
                results.append(float(done["meta_info"]["e2e_latency"]))
            return results

        with ThreadPoolExecutor(8) as pool:
            loop_e2e = [e for per_client in pool.map(client, range(8)) for e in per_client]
        wall = time.monotonic() - started
        info = httpx.get(f"{engine.url}/server_info", timeout=30).json()
        return Figures(
            mode=mode,
            host="loaded" if loaded else "idle",
            single_tok_s=single_tok_s,
            batch_tok_s=tokens / max(e2e),
            batch_mean_e2e=sum(e2e) / len(e2e),
            loop_mean_e2e=sum(loop_e2e) / len(loop_e2e),
            reanchored_s=float(info["sim_clock"]["reanchored_s"]),
            wall_s=wall,
        )
    finally:
        engine.stop(timeout=10)
        for proc in burners:
            proc.terminate()
        for proc in burners:
            proc.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--modes", default="realtime,fast")
    parser.add_argument("--log-dir", default="/tmp/plinth-bench-sim-clock")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args()
    results = [
        run(mode, loaded, args) for mode in args.modes.split(",") for loaded in (False, True)
    ]
    print(f"time scale {args.time_scale:g}, {os.cpu_count()} CPUs; figures in simulated time")
    print(
        "clock     host    1-stream tok/s  batch tok/s  batch e2e s  closed-loop e2e s  "
        "reanchored s  wall s"
    )
    for r in results:
        print(
            f"{r.mode:<9} {r.host:<7} {r.single_tok_s:>14.1f} {r.batch_tok_s:>12.1f} "
            f"{r.batch_mean_e2e:>12.3f} {r.loop_mean_e2e:>18.3f} {r.reanchored_s:>13.3f} "
            f"{r.wall_s:>7.1f}"
        )
    for mode in args.modes.split(","):
        idle, loaded = (r for r in results if r.mode == mode)
        drift = [
            abs(loaded.single_tok_s / idle.single_tok_s - 1),
            abs(loaded.batch_tok_s / idle.batch_tok_s - 1),
            abs(loaded.loop_mean_e2e / idle.loop_mean_e2e - 1),
        ]
        print(f"{mode}: loaded vs idle differ by at most {100 * max(drift):.2f}%")
    if args.json:
        print(json.dumps([r.__dict__ for r in results]))


if __name__ == "__main__":
    main()
