"""``python -m runtime.sim <SGLang launch flags> [--sim-* options]``: run one simulated engine.

Exit status: 2 for a malformed flag (as argparse, and so SGLang, exits), 1 for a configuration
SGLang would refuse at start-up (e.g. not enough memory for the weights), 0 after a graceful drain.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from runtime.perf.hardware import UnknownGpu, resolve_gpu, resolve_model
from runtime.sim.args import StartupError, build_parser, check_engine_args, parse_engine_args
from runtime.sim.engine import Engine
from runtime.sim.memory import plan_memory
from runtime.sim.server import SimServer


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_engine_args(argv)
    try:
        gpu = resolve_gpu(args.sim.gpu)
    except UnknownGpu as exc:
        build_parser().error(f"argument --sim-gpu: {exc}")
    try:
        check_engine_args(args)
        model = resolve_model(args.model_path, _warn)
        plan = plan_memory(args, gpu, model)
    except StartupError as exc:
        print(f"ERROR: {exc}", file=sys.stderr, flush=True)
        return 1
    _warn(
        f"runtime.sim: simulating {model.id} on {args.tp_size}x {gpu.id}: "
        f"max_total_num_tokens={plan.max_total_num_tokens}, "
        f"max_running_requests={plan.max_running_requests}, "
        f"chunked_prefill_size={plan.chunked_prefill_size}, time_scale={args.sim.time_scale:g}"
    )

    async def serve() -> None:
        await SimServer(Engine(args, gpu, model, plan)).run()

    asyncio.run(serve())
    return 0


def _warn(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
