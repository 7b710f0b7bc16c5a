"""The warm pool's in-pod agent on Kubernetes: flips its engine between serving and released as
its pod's ``plinth.dev/warm`` annotation says, and tells the kubelet whether the pod may serve.

Why an agent in the pod: the worker reaches the cluster only through its API server, never pod
IPs (the endpoint's NetworkPolicy lets in its own pods and the gateway, and the worker may run
outside the cluster), so it cannot call SGLang's ``/release_memory_occupation`` itself. It
writes an annotation instead (one ``patch`` on pods, the only right it needs beyond reading
them). The kubelet projects that annotation into this container as a file (a downward API
volume: no ServiceAccount token and no API call from the pod, so the engine pod gets no RBAC at
all); the kubelet refreshes the file when it syncs the pod after the update, within seconds,
and at worst within its sync period (a minute). This agent reads the file every second and
calls the engine on localhost:

- ``true`` (warm): out of service first (this container's readiness fails, so the pod leaves
  the router's discovery and the Services, which take only ready pods), then the engine's GPU
  memory released once it has no request left (SGLang refuses a busy engine; asked again).
- anything else (absent, ``false``): serving; a released engine is resumed
  (``/resume_memory_occupation``), then the pod is ready again when the engine is.

Its own ``/ready`` answers 200 only when the pod should serve and the engine is ready (the pod's
readiness is every container's). The engine container's liveness probe asks this agent's
``/live`` rather than the engine's ``/health``: SGLang answers ``/health`` with a one-token
generation, which a released engine cannot run, and the kubelet would restart a warm engine for
it; ``/live`` is the engine's ``/health`` while it serves, and while released only whether its
HTTP server answers at all. SGLang's ``/ready`` checks only that the server is up and not
paused (reference/SGLANG.md), so it may answer 200 while released: that the agent released the
engine is its own record, a file beside (an emptyDir that outlives a restart of this
container), so a restarted agent still resumes.

It is copied alone into the pod (a ConfigMap) and run by the engine image's own Python, so it
imports nothing but the standard library.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

WARM = "true"
POLL_S = 1.0
# The kubelet's probe of this agent's /ready (``render.warm``): how soon a resumed pod reads ready.
READY_PROBE_PERIOD_S = 2
# A resume copies every GPU's weights back over the host link: seconds on a real engine.
RESUME_TIMEOUT_S = 300.0


class Agent:
    def __init__(self, engine: str, flag: Path, state: Path, api_key: str) -> None:
        self.engine = engine.rstrip("/")
        self.flag = flag
        self.state = state
        self.api_key = api_key
        self.serving = False  # what /ready answers

    def wants_warm(self) -> bool:
        try:
            return self.flag.read_text().strip() == WARM
        except OSError:  # not projected yet: a pod starts serving
            return False

    @property
    def released(self) -> bool:
        return self.state.exists()

    def _call(self, method: str, path: str, timeout: float) -> bool:
        return 200 <= self._status(method, path, timeout) < 300

    def _status(self, method: str, path: str, timeout: float) -> int:
        """The engine's HTTP status for ``path``; 0 when it did not answer."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = b"{}" if method == "POST" else None
        url = self.engine + path  # the engine on localhost, from the pod's own arguments
        request = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:  # noqa: S310
                return int(reply.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except (urllib.error.URLError, OSError):
            return 0

    def engine_ready(self) -> bool:
        return self._call("GET", "/ready", 5.0)

    def engine_alive(self) -> bool:
        if self.released:
            return self._status("GET", "/ready", 5.0) != 0
        return self._call("GET", "/health", 25.0)

    def step(self) -> None:
        """One look at the annotation and the engine, and what follows from them."""
        if self.wants_warm():
            self.serving = False  # out of service before the memory goes
            if not self.released and self.engine_ready() and self._release():
                self.state.write_text(json.dumps({"released_at": time.time()}))
                log("released the engine's GPU memory (warm pool)")
            return
        if self.released:
            resumed = self._call("POST", "/resume_memory_occupation", RESUME_TIMEOUT_S)
            # Refused while ready: an engine that restarted meanwhile was never released.
            if not resumed and not self.engine_ready():
                return
            self.state.unlink(missing_ok=True)
            log("resumed the engine from the warm pool")
        self.serving = self.engine_ready()

    def _release(self) -> bool:
        return self._call("POST", "/release_memory_occupation", 30.0)

    def run(self) -> None:
        while True:
            self.step()
            time.sleep(POLL_S)


def log(message: str) -> None:
    print(f"warm-agent: {message}", flush=True)


def serve(agent: Agent, port: int) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            ok = (path == "/ready" and agent.serving) or (path == "/live" and agent.engine_alive())
            self.send_response(200 if ok else 503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:  # the kubelet probes every few seconds
            pass

    server = http.server.ThreadingHTTPServer(("0.0.0.0", port), Handler)  # noqa: S104 - the kubelet probes the pod's IP
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", required=True, help="the engine's URL on localhost")
    parser.add_argument("--flag", type=Path, required=True, help="the projected annotation")
    parser.add_argument("--state", type=Path, required=True, help="where a release is kept")
    parser.add_argument("--port", type=int, required=True, help="this agent's /ready")
    args = parser.parse_args()
    agent = Agent(args.engine, args.flag, args.state, os.environ.get("PLINTH_API_KEY", ""))
    serve(agent, args.port)
    log(f"watching {args.flag} for {args.engine}")
    agent.run()


if __name__ == "__main__":
    main()
