"""`python -m gateway`: serve the gateway with uvicorn (uvloop and httptools when installed)."""

from __future__ import annotations

import argparse
import os

import uvicorn


def main() -> None:
    parser = argparse.ArgumentParser(description="Plinth inference gateway")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--metrics-port", type=int, default=9090)
    # Not --host: the public inference address must not open the metrics listener with it.
    parser.add_argument(
        "--metrics-host",
        default=os.environ.get("PLINTH_GATEWAY_METRICS_HOST") or "127.0.0.1",
        help="address of the /metrics listener (default 127.0.0.1: it lists every org's slugs)",
    )
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "info").lower())
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ["PLINTH_GATEWAY_METRICS_PORT"] = str(args.metrics_port)
    os.environ["PLINTH_GATEWAY_METRICS_HOST"] = args.metrics_host
    uvicorn.run(
        "gateway.app:app",
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        # The gateway writes its own structured access log (gateway.observability).
        access_log=False,
        # Clients' addresses are not used, and the Server header would only advertise uvicorn.
        proxy_headers=False,
        server_header=False,
        lifespan="on",
        loop="auto",
        http="auto",
        # Streams can be long; keep idle client connections for reuse like a proxy would.
        timeout_keep_alive=75,
    )


if __name__ == "__main__":
    main()
