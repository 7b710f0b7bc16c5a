"""How long `python -m runtime optimize` takes in a fresh process, next to a reference commit's.

Issue 27 item 4's targets: the command answers in under 1 s cold (it used to import the confirm
path, aiohttp and the simulator, even without ``--confirm``), and the search itself in under
0.5 s. Each command runs `--runs` times in a fresh interpreter, from this checkout and from
the reference commit (default: the commit before the change, unpacked with ``git archive`` into
a temporary folder), alternating, so both see the same machine load; the medians are printed
side by side, then the in-process search time of each case (warm, median of `--runs`).

    .venv/bin/python bench/optimizer_cli.py [--ref COMMIT] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [
    ["llama-3.1-8b", "--gpu", "H100-SXM", "--rate", "5"],
    ["llama-3.1-8b"],
    ["llama-3.1-70b", "--rate", "5", "--input-tokens", "4000", "--turns", "3", "--itl", "0.03"],
    ["qwen3-235b-a22b", "--rate", "4", "--ttft", "2"],
]


def unpack(commit: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "archive", commit], cwd=ROOT, capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def cold_seconds(tree: Path, argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "runtime", "optimize", *argv],
        cwd=tree,
        env=env,
        capture_output=True,
        check=False,
    )
    return time.perf_counter() - start


def search_seconds(argv: list[str], runs: int) -> float:
    from runtime.__main__ import _optimize_parser
    from runtime.optimize import OptimizeRequest, Slo, Traffic, optimize

    args = _optimize_parser().parse_args(argv)
    request = OptimizeRequest(
        model=args.model,
        gpus=tuple(args.gpu),
        traffic=Traffic(
            args.input_tokens, args.output_tokens, rate_rps=args.rate or 1.0, turns=args.turns
        ),
        slo=Slo.targets(args.ttft, args.itl),
    )
    optimize(request)  # the catalogue's first load is the cold run's business
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        optimize(request)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="091f48b", help="the reference commit")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ref = unpack(args.ref, Path(tmp))
        print(f"cold `python -m runtime optimize ...`, median of {args.runs} (s); "
              f"search in process, warm (s)")  # fmt: skip
        print(f"{'case':80} {'this':>6} {args.ref:>8} {'search':>7}")
        for argv in CASES:
            mine, theirs = [], []
            for _ in range(args.runs):
                mine.append(cold_seconds(ROOT, argv))
                theirs.append(cold_seconds(ref, argv))
            search = search_seconds(argv, args.runs)
            print(f"{' '.join(argv):80} {statistics.median(mine):6.2f} "
                  f"{statistics.median(theirs):8.2f} {search:7.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
