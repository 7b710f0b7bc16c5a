"""`python -m gateway`: serve the gateway with uvicorn."""

from __future__ import annotations

import argparse
import os

import uvicorn


def main() -> None:
    parser = argparse.ArgumentParser(description="Plinth inference gateway")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--metrics-port", type=int, default=9090)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ["PLINTH_GATEWAY_METRICS_PORT"] = str(args.metrics_port)
    uvicorn.run("gateway.app:app", host=args.host, port=args.port, log_level="info")


if __name__ == "__main__":
    main()
