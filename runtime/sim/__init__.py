"""A simulated SGLang 0.5.23 engine: the same launch flags and HTTP API, no GPU.

Run one with ``python -m runtime.sim <SGLang launch flags> [--sim-* options]``; start several behind
the smg router from Python with ``runtime.sim.launcher``. Modules, by what they hold:

- ``args``: the command line (SGLang's flag names, types and choices; ``--sim-*``/``PLINTH_SIM_*``)
- ``hardware``, ``memory``, ``roofline``: the GPU and model, KV pool sizing, step time
- ``tokenizer``, ``sampling``: deterministic text, token ids and logprobs
- ``radix``, ``kvpool``, ``scheduler``, ``request``: the prefix cache and continuous batching
- ``engine``: the step loop in scaled real time, loads and metric gauges
- ``server``, ``native_api``, ``openai_api``, ``generation``, ``errors``: the HTTP surface
- ``metrics``: Prometheus metrics with SGLang's names and labels; ``faults``: injected failures
- ``lora``: LoRA adapters (registry, GPU pool slots and eviction, the load/unload API)
- ``launcher``: start engines and smg as processes (for tests and benchmarks)

It is never presented as a real engine: ``/server_info`` says ``"simulated": true``.
"""
