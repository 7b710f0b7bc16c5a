"""The HTTP server of the simulated engine (aiohttp): routes, auth, lifecycle and graceful drain.

Lifecycle as SGLang's: the port opens at once, ``/health`` and ``/ready`` answer 503 until the
(simulated) weights are loaded, then 200. On SIGTERM the engine stops admitting (generation routes
and ``/ready`` answer 503), finishes what is in flight, then exits 0. Auth follows SGLang's
``auth.py``: ``/health*``, ``/ready`` and ``/metrics`` are always open; ``--api-key`` guards the
rest; ``--admin-api-key`` guards admin routes such as ``/flush_cache``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import os
import signal
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from runtime.sim.disagg import bootstrap_app
from runtime.sim.engine import SGLANG_VERSION, Engine
from runtime.sim.errors import openai_error, unauthorized
from runtime.sim.faults import FaultInjector
from runtime.sim.generation import ServingContext
from runtime.sim.lora import handle_load, handle_unload, model_cards
from runtime.sim.native_api import handle_generate
from runtime.sim.openai_api import handle_chat, handle_completions
from runtime.sim.request import GenerationParams
from runtime.sim.startup import fetch_line, leave_marker, plan_start, resume_seconds
from runtime.startup import FIRED_UP

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PREFIXES = ("/health", "/ready", "/metrics")
ADMIN_ROUTES = (
    "/flush_cache", "/release_memory_occupation", "/resume_memory_occupation",
    "/load_lora_adapter", "/unload_lora_adapter",
)  # fmt: skip
LOAD_SECTIONS = {"core", "memory", "spec", "lora", "disagg", "queues", "all"}
HEALTH_TIMEOUT_S = 20.0
DRAIN_POLL_S = 0.02


class SimServer:
    def __init__(self, engine: Engine, log: Callable[[str], None] | None = None) -> None:
        self.engine = engine
        self.args = engine.args
        self.ctx = ServingContext(self.args, engine, FaultInjector(self.args.sim))
        self.log = log or _log
        self.state = "starting"
        self.started_at = time.time()
        self._stopped = asyncio.Event()
        self._warned: set[str] = set()
        self._elapsed = 0.0

    # ---- lifecycle ---------------------------------------------------------------------------
    async def run(self) -> None:
        runner = web.AppRunner(self.build_app(), handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.args.host, self.args.port, reuse_address=True)
        await site.start()
        self.log(f"runtime.sim: listening on http://{self.args.host}:{self.args.port}")
        bootstrap_runner = await self._start_bootstrap_server()
        engine_task = asyncio.create_task(self.engine.run())
        engine_task.add_done_callback(self._engine_stopped)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.begin_drain)
        await self._load()
        await self._stopped.wait()
        engine_task.cancel()
        if bootstrap_runner is not None:
            await bootstrap_runner.cleanup()
        await runner.cleanup()
        self.log("runtime.sim: shut down")

    async def _start_bootstrap_server(self) -> web.AppRunner | None:
        """A P/D prefill engine serves its KV on ``--disaggregation-bootstrap-port``, as SGLang."""
        if self.args.disaggregation_mode != "prefill":
            return None
        port = self.args.disaggregation_bootstrap_port
        runner = web.AppRunner(bootstrap_app(self.engine.kv_registry), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, self.args.host, port, reuse_address=True).start()
        self.log(f"runtime.sim: KV bootstrap server on {self.args.host}:{port}")
        return runner

    def _engine_stopped(self, task: asyncio.Task[None]) -> None:
        """A dead step loop would hang every request: crash instead, as SGLang's scheduler does."""
        error = None if task.cancelled() else task.exception()
        if error is None:
            return
        traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        self.log("runtime.sim: the engine loop crashed; exiting")
        os._exit(1)

    async def _load(self) -> None:
        """Start as SGLang does, phase by phase (``runtime.sim.startup``), then serve."""
        delay = self.args.sim.startup_delay
        start = plan_start(self.args, self.engine.gpu, self.engine.model, self._max_running())
        self._elapsed = 0.0  # simulated seconds of the start so far
        self._log_start(f"Load weight begin. avail mem={self.engine.gpu.memory_gib:.2f} GB")
        if start.download_s:
            await self._phase(start.download_s)
            self._log_start(fetch_line(start))
            leave_marker(self.args, self.engine.model)
        await self._phase(start.load_s)
        await self._phase(self._adapters_load_s())
        await asyncio.sleep(delay)  # the test control: real seconds, on top of the model
        load = start.download_s + start.load_s
        self._log_start(
            f"Load weight end. elapsed={load:.2f} s, type={self.engine.model.architecture}, "
            f"mem usage={self.engine.plan.weight_gb:.2f} GB."
        )
        self._log_start(f"Capture cuda graph begin. bs={start.graph_count} graphs")
        await self._phase(start.graphs_s)
        self._log_start(f"Capture cuda graph end. Time elapsed: {start.graphs_s:.2f} s.")
        await self._phase(start.warmup_s)
        if self.state != "starting":
            return
        metrics = self.engine.metrics
        metrics.set_startup_time("load_weight", load)
        metrics.set_startup_time("cuda_graph", start.graphs_s)
        metrics.set_startup_time("total", start.total_s + delay)
        self.state = "ready"
        self.ctx.accepting = True
        self._log_start(f"{FIRED_UP} (runtime.sim, simulated engine)")

    def _adapters_load_s(self) -> float:
        """The ``--lora-paths`` adapters, read from their sources one after another."""
        pool = self.engine.lora
        return sum(pool.load_seconds(a.path) for a in pool.registry.values()) if pool else 0.0

    def _max_running(self) -> int:
        return int(self.engine.scheduler.config.max_running_requests)

    async def _phase(self, simulated_s: float) -> None:
        """Wait out a start phase at the time scale, and count it on the start's clock."""
        self._elapsed += simulated_s
        if simulated_s > 0:
            await asyncio.sleep(simulated_s / self.args.sim.time_scale)

    def _log_start(self, line: str) -> None:
        """A start line, stamped on the start's simulated clock (``runtime.sim.startup``)."""
        if self.log is _log:
            _log(line, at=self.started_at + self._elapsed)
        else:
            self.log(line)

    def begin_drain(self) -> None:
        if self.state == "draining":
            self.log("runtime.sim: second signal, stopping now")
            self._stopped.set()
            return
        self.log("runtime.sim: draining: no new requests, finishing the ones in flight")
        self.state = "draining"
        self.ctx.accepting = False
        asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        deadline = time.monotonic() + self.args.sim.drain_timeout
        while time.monotonic() < deadline:
            if self.ctx.active_runs == 0 and not self.engine.scheduler.has_work():
                break
            await asyncio.sleep(DRAIN_POLL_S)
        self._stopped.set()

    # ---- application -------------------------------------------------------------------------
    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._http_metrics, self._auth])
        ctx = self.ctx
        routes: list[tuple[str, str, Handler]] = [
            ("GET", "/health", self.health),
            ("GET", "/health_generate", self.health_generate),
            ("GET", "/ready", self.ready),
            ("GET", "/ping", self.ping),
            ("GET", "/model_info", self.model_info),
            ("GET", "/get_model_info", self.model_info),
            ("GET", "/server_info", self.server_info),
            ("GET", "/get_server_info", self.server_info),
            ("GET", "/v1/models", self.models),
            ("GET", "/v1/models/{model:.+}", self.model_card),
            ("GET", "/v1/loads", self.loads),
            ("POST", "/release_memory_occupation", self.release_memory),
            ("POST", "/resume_memory_occupation", self.resume_memory),
            ("GET", "/flush_cache", self.flush_cache),
            ("POST", "/flush_cache", self.flush_cache),
            ("GET", "/metrics", self.metrics),
            ("POST", "/load_lora_adapter", self.load_lora),
            ("POST", "/unload_lora_adapter", self.unload_lora),
            ("POST", "/generate", lambda r: handle_generate(ctx, r)),
            ("PUT", "/generate", lambda r: handle_generate(ctx, r)),
            ("POST", "/v1/completions", lambda r: handle_completions(ctx, r)),
            ("POST", "/v1/chat/completions", lambda r: handle_chat(ctx, r)),
        ]
        for method, path, handler in routes:
            app.router.add_route(method, path, handler)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path.startswith(OPEN_PREFIXES):
            return await handler(request)
        required = self.args.api_key
        if path in ADMIN_ROUTES and self.args.admin_api_key:
            required = self.args.admin_api_key
        if required is not None:
            given = request.headers.get("Authorization", "")
            token = given[7:] if given.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(token.encode(), required.encode()):
                return unauthorized()
        return await handler(request)

    @web.middleware
    async def _http_metrics(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        endpoint = resource.canonical if resource is not None else request.path
        metrics = self.engine.metrics
        metrics.http_started(endpoint, request.method)
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            metrics.http_finished(endpoint, request.method, status)

    # ---- probes ------------------------------------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.state == "ready" else 503)

    async def ready(self, request: web.Request) -> web.Response:
        if self.state == "ready":
            return web.Response(text="OK")
        return web.Response(status=503, text="Service Unavailable")

    async def ping(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.state == "ready" else 503)

    async def health_generate(self, request: web.Request) -> web.Response:
        """A one-token generation through the scheduler, kept out of the request metrics."""
        if self.state != "ready":
            return web.Response(status=503)
        req = self.engine.new_request([0], GenerationParams(max_new_tokens=1), stream=False)
        req.rid = f"HEALTH_CHECK_{req.rid}"
        self.engine.submit(req)
        try:
            await asyncio.wait_for(req.updates.get(), HEALTH_TIMEOUT_S)
        except TimeoutError:
            self.engine.abort(req)
            return web.Response(status=503)
        return web.Response(status=200)

    # ---- information -------------------------------------------------------------------------
    async def model_info(self, request: web.Request) -> web.Response:
        self._warn_deprecated(request.path)
        args, model = self.args, self.engine.model
        return web.json_response(
            {
                "model_path": args.model_path,
                "tokenizer_path": args.tokenizer_path or args.model_path,
                "served_model_name": args.served_model_name,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "load_format": "auto",
                "reasoning_parser": None,
                "tool_call_parser": None,
                "disaggregation_mode": args.disaggregation_mode,
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": model.architecture.removesuffix("ForCausalLM").lower(),
                "architectures": [model.architecture],
            }
        )

    async def server_info(self, request: web.Request) -> web.Response:
        self._warn_deprecated(request.path)
        return web.json_response(self.server_info_document())

    def server_info_document(self) -> dict[str, Any]:
        args, plan, engine = self.args, self.engine.plan, self.engine
        info = {k: v for k, v in dataclasses.asdict(args).items() if k not in ("sim",)}
        info.update(
            api_key="***" if args.api_key else None,  # SGLang echoes it; the simulator will not
            admin_api_key="***" if args.admin_api_key else None,
            ignored_flags=list(args.ignored_flags),
            mem_fraction_static=plan.mem_fraction_static,
            chunked_prefill_size=plan.chunked_prefill_size,
            max_running_requests=engine.scheduler.config.max_running_requests,
            max_total_num_tokens=plan.max_total_num_tokens,
            page_size=plan.page_size,
            context_length=plan.context_length,
            enable_dp_attention=args.attn_dp_size > 1,
            internal_states=[self._internal_state()],
            startup_time=self.started_at,
            version=SGLANG_VERSION,
            frontend="python",
            simulated=True,
            sim={**dataclasses.asdict(args.sim), "gpu": dataclasses.asdict(engine.gpu)},
            # The engine's own clock: latencies everywhere are in these simulated seconds.
            sim_clock={
                "mode": engine.clock.mode,
                "time_scale": engine.clock.time_scale,
                "simulated_seconds": round(engine.now(), 6),
                "debt_s": round(engine.clock.debt(), 6),
                "reanchored_s": round(engine.clock.reanchored_s, 6),
            },
            sim_model=dataclasses.asdict(engine.model),
        )
        if engine.lora is not None:
            # The GPU pool's slots (null: the base) and its evictions: nothing SGLang reports.
            slots = list(engine.lora.slots)
            info["sim_lora"] = {"slots": slots, "evictions": engine.lora.evictions}
        return info

    def _internal_state(self) -> dict[str, Any]:
        engine = self.engine
        return {
            "max_total_num_tokens": engine.plan.max_total_num_tokens,
            "last_gen_throughput": engine.gen_throughput(),
            "avg_spec_accept_length": engine.spec_accept_length() or None,
            "memory_usage": {
                "weight": round(engine.plan.weight_gb, 3),
                "kvcache": round(engine.plan.kv_cache_gb, 3),
                "graph": 0.0,
                "token_capacity": engine.plan.max_total_num_tokens,
            },
        }

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": self._model_cards()})

    async def model_card(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        card = next((c for c in self._model_cards() if c["id"] == name), None)
        if card is None:
            return openai_error(
                f"The model '{name}' does not exist", 404, "NotFoundError", param="model"
            )
        return web.json_response(card)

    def _model_cards(self) -> list[dict[str, Any]]:
        """The base, then each loaded LoRA adapter with ``parent`` set to the base's name."""
        pool, served = self.engine.lora, self.args.served_model_name
        adapters = model_cards(pool, served, int(self.started_at)) if pool else []
        return [self._model_card(), *adapters]

    async def load_lora(self, request: web.Request) -> web.Response:
        return await handle_load(self.engine.lora, self.args.sim.time_scale, request)

    async def unload_lora(self, request: web.Request) -> web.Response:
        return await handle_unload(self.engine.lora, self.engine.scheduler.uses_adapter, request)

    def _model_card(self) -> dict[str, Any]:
        name = self.args.served_model_name
        return {
            "id": name,
            "object": "model",
            "created": int(self.started_at),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": self.engine.plan.context_length,
        }

    async def loads(self, request: web.Request) -> web.Response:
        include_arg = request.query.get("include")
        include = {s.strip() for s in include_arg.split(",")} if include_arg else None
        if include and include - LOAD_SECTIONS:
            invalid = include - LOAD_SECTIONS
            message = f"Invalid include sections: {invalid}. Valid options: {sorted(LOAD_SECTIONS)}"
            return web.json_response({"detail": message}, status=400)
        document = self.engine.loads_document(include)
        if request.query.get("format") == "prometheus":
            return web.Response(text=_loads_prometheus(document), content_type="text/plain")
        return web.json_response(document)

    # ---- a warm pool's replica: loaded, its GPU memory released until it is needed ----------
    async def release_memory(self, request: web.Request) -> web.Response:
        """SGLang's ``/release_memory_occupation``: weights and KV cache leave the GPU (kept in
        host memory), so a warm replica holds the process and its CUDA graphs but no GPU
        memory. Until resumed it takes no requests (``/ready`` answers 503, as while loading)."""
        if self.state != "ready" or self.ctx.active_runs or self.engine.scheduler.has_work():
            return web.json_response({"success": False, "message": "not idle"}, status=400)
        self.state, self.ctx.accepting = "released", False
        self.log("runtime.sim: memory occupation released (weights and KV cache off the GPU)")
        return web.json_response({"success": True, "message": "released"})

    async def resume_memory(self, request: web.Request) -> web.Response:
        """SGLang's ``/resume_memory_occupation``: the weights copied back over the host link
        (``runtime.sim.startup.resume_seconds``), then ready again."""
        if self.state != "released":
            return web.json_response({"success": False, "message": "not released"}, status=400)
        seconds = resume_seconds(self.args, self.engine.gpu, self.engine.model)
        await asyncio.sleep(seconds / self.args.sim.time_scale)
        self.state, self.ctx.accepting = "ready", True
        self.log(f"runtime.sim: memory occupation resumed in {seconds:.2f} s (simulated)")
        return web.json_response({"success": True, "message": "resumed", "seconds": seconds})

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.engine.scheduler.flush_cache():
            return web.Response(
                text="Cache flushed.\nPlease check backend logs for more details. "
                "(When there are running or waiting requests, the operation will not be "
                "performed.)\n"
            )
        return web.Response(status=400, text="Cache not flushed: requests are in flight.\n")

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.args.enable_metrics:
            raise web.HTTPNotFound()
        self.engine.refresh_metrics()
        body = self.engine.metrics.render()
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})

    def _warn_deprecated(self, path: str) -> None:
        if path.startswith("/get_") and path not in self._warned:
            self._warned.add(path)
            self.log(f"WARNING: {path} is deprecated; use /{path.removeprefix('/get_')}")


def _loads_prometheus(document: dict[str, Any]) -> str:
    lines: list[str] = []
    for load in document["loads"]:
        rank = load["dp_rank"]
        for key, value in load.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or key == "dp_rank":
                continue
            lines.append(f"# TYPE sglang_{key} gauge")
            lines.append(f'sglang_{key}{{dp_rank="{rank}"}} {value}')
    return "\n".join(lines) + "\n"


def _log(line: str, at: float | None = None) -> None:
    # Stamped as SGLang's logging stamps its lines (local time), so log readers find the time.
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))
    print(f"[{stamp}] {line}", file=sys.stderr, flush=True)
