"""Command line: ``python -m plinth_quantize run --job JOB.json``."""

from __future__ import annotations

import argparse
import json
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="plinth_quantize")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one quantization job")
    run.add_argument("--job", required=True, help="the JOB.json file")
    args = parser.parse_args(argv)
    # Events own stdout: keep a handle on it, then point fd 1 at stderr so nothing the library
    # or its dependencies print (progress bars, warnings, prints) can land between them.
    events = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    try:
        from plinth_quantize.runner import run_job
    except Exception as exc:  # a broken environment still answers with an error event
        events.write(json.dumps({"event": "error", "message": f"cannot start: {exc!r}"}) + "\n")
        raise
    return run_job(args.job, events)


if __name__ == "__main__":
    sys.exit(main())
