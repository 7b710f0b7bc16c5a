"""RuntimeSpec -> LaunchPlan: for each role, the exact command, env, ports, resources and probes.

Drivers place a LaunchPlan; they never build SGLang flags themselves. Only canonical long flags are
emitted (`--tp-size`, never `--tp`), and every argv is checked against the flag catalogue of the
pinned SGLang version (and of smg for the router) by `runtime.validate`.

What the plan leaves to the driver: worker discovery flags of the router (`--worker-urls` locally,
`--service-discovery --selector ...` on Kubernetes), `--node-rank` / `--dist-init-addr` of
multi-node groups, and the endpoint's `--api-key` (engines and router: a secret, so a plan never
holds it; Kubernetes passes `$(PLINTH_API_KEY)` from a Secret). All are set with `with_flag`.

This module is the one home of argv: the local driver, the Kubernetes render and `python -m runtime
plan` all take their argv from `plan` (and `with_flag`), and both refuse to hand out a token the
launcher could misread: a flag outside the catalogue or given twice, an extra flag outside the
allowlist, a value that would parse as a flag or that holds a control character
(`UnsafeArgvError`). Validation refuses such specs first; this is the second line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from runtime.argv import UnsafeArgvError, token_problem
from runtime.catalog import SMG_VERSION, FlagCatalog, get_gpu, sglang_flags, smg_flags
from runtime.catalog.flags import arity_problem, split_argv
from runtime.extra_flags import flag_argv
from runtime.lora import lora_args
from runtime.memory import (
    GIB,
    cuda_graph_max_bs,
    host_memory_per_node,
    memory_fit,
    model_weight_bytes,
)
from runtime.routing_key import ROUTING_KEY_HEADER
from runtime.spec import RoutingDefaults, RoutingPlacement, RoutingPolicy, RuntimeSpec
from runtime.topology import EngineGroup, engine_groups

ENGINE_PORT = 30000
ROUTER_PORT = 8000
ROUTER_METRICS_PORT = 29000
DIST_INIT_PORT = 20000
ENGINE_COMMAND = ("python3", "-m", "sglang.launch_server")
ROUTER_COMMAND = ("smg", "launch")
ROUTER_IMAGE = f"lightseekorg/smg:{SMG_VERSION}"
ENGINE_DRAIN_SECONDS = 120  # in-flight generations get this long after SIGTERM
ROUTER_DRAIN_SECONDS = 30
ROUTER_HEALTH_CHECK_SECONDS = 10

_LONG_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
RoleName = Literal["engine", "prefill", "decode", "router"]
# SGLang spells multi-token prediction NEXTN (an alias of EAGLE that loads the MTP layers).
_ALGORITHM_FLAG = {
    "EAGLE": "EAGLE",
    "EAGLE3": "EAGLE3",
    "MTP": "NEXTN",
    "NGRAM": "NGRAM",
    "STANDALONE": "STANDALONE",
}


class Probe(BaseModel):
    """An HTTP GET probe, in Kubernetes' terms."""

    model_config = ConfigDict(frozen=True)

    path: str
    port: int
    initial_delay_s: int = 0
    period_s: int = 10
    timeout_s: int = 5
    failure_threshold: int = 3


class KvStorageMount(BaseModel):
    """The directory HiCache's file storage tier writes pages to: a node path or a claim, mounted
    in the engine at `HICACHE_STORAGE_PATH`."""

    model_config = ConfigDict(frozen=True)

    node_path: str | None = None
    claim: str | None = None


class RolePlan(BaseModel):
    """One role of an endpoint. For multi-node groups the probes are for rank 0 only: ranks >= 1
    serve no HTTP (SGLANG.md section 6), so drivers give them no HTTP probe."""

    model_config = ConfigDict(frozen=True)

    role: RoleName
    image: str
    command: list[str]
    args: list[str]
    env: dict[str, str]
    port: int
    metrics_port: int | None
    extra_ports: dict[str, int]
    gpus_per_node: int
    nodes_per_replica: int
    replicas: int
    shm_size_gib: int | None
    startup_probe: Probe | None
    readiness_probe: Probe | None
    liveness_probe: Probe | None
    drain_seconds: int
    served_model_name: str
    # HiCache: the host memory a node of this role pins for its host tier (GiB, rounded up; the
    # Kubernetes render requests it), and where its file storage tier lives (None: no such tier).
    host_tier_gib_per_node: int = 0
    kv_storage: KvStorageMount | None = None

    @property
    def argv(self) -> list[str]:
        return [*self.command, *self.args]

    @property
    def multi_node(self) -> bool:
        return self.nodes_per_replica > 1


class LaunchPlan(BaseModel):
    model_config = ConfigDict(frozen=True)

    roles: list[RolePlan]

    def role(self, name: RoleName) -> RolePlan | None:
        return next((r for r in self.roles if r.role == name), None)


def with_flag(args: Sequence[str], flag: str, value: str | int | None = None) -> list[str]:
    """`args` with `flag` set to `value` (replacing all its old values) or appended.

    `value=None` sets a bare switch. Pure: `args` is not modified. Raises `UnsafeArgvError` for a
    flag that is not a long option or a value that would be read as one.
    """
    _refuse_token(flag, is_flag=True)
    if value is not None:
        _refuse_token(str(value), is_flag=False)
    out: list[str] = []
    skipping = False
    replaced = False
    new = [flag] if value is None else [flag, str(value)]
    for token in args:
        if skipping and not token.startswith("--"):
            continue
        skipping = False
        if token == flag or token.startswith(flag + "="):
            skipping = token == flag
            if not replaced:
                out.extend(new)
                replaced = True
            continue
        out.append(token)
    return out if replaced else [*out, *new]


def _refuse_token(token: str, *, is_flag: bool) -> None:
    if is_flag:
        problem = None if _LONG_FLAG.fullmatch(token) else "is not a long flag"
    else:
        problem = token_problem(token)
    if problem is not None:
        raise UnsafeArgvError("runtime", f"{token!r} {problem}")


def _valued(pairs: Sequence[tuple[str, object]]) -> list[str]:
    """`--flag value` for each pair whose value is set (None means: leave SGLang's default)."""
    return [token for flag, value in pairs if value is not None for token in (flag, str(value))]


def _model_args(spec: RuntimeSpec) -> list[str]:
    model = spec.model
    args = ["--model-path", model.source]
    if model.revision:
        args += ["--revision", model.revision]
    if model.served_name:
        args += ["--served-model-name", model.served_name]
    if model.trust_remote_code:
        args.append("--trust-remote-code")
    if model.context_length:
        args += ["--context-length", str(model.context_length)]
    if model.dtype != "auto":
        args += ["--dtype", model.dtype]
    return args


def _serving_args(labels: dict[str, str] | None) -> list[str]:
    args = ["--host", "0.0.0.0", "--port", str(ENGINE_PORT)]  # noqa: S104 - pods serve on all IPs
    args += ["--enable-metrics", "--enable-cache-report"]
    if labels:
        args += ["--extra-metric-labels", json.dumps(labels, sort_keys=True, separators=(",", ":"))]
    return args


def _parallel_args(group: EngineGroup) -> list[str]:
    args = ["--tp-size", str(group.tp)]
    for flag, size in (("--pp-size", group.pp), ("--attn-dp-size", group.attn_dp)):
        if size > 1:
            args += [flag, str(size)]
    if group.ep > 1:
        args += ["--ep-size", str(group.ep)]
    args += ["--moe-a2a-backend", group.moe_a2a] if group.moe_a2a != "none" else []
    if group.nodes > 1:
        args += ["--nnodes", str(group.nodes)]
    return args


def _batching_args(spec: RuntimeSpec) -> list[str]:
    batch = spec.batching
    valued = (
        ("--max-running-requests", batch.max_running_requests),
        ("--max-prefill-tokens", batch.max_prefill_tokens),
        ("--chunked-prefill-size", batch.chunked_prefill_size),
        ("--schedule-policy", batch.schedule_policy),
        ("--schedule-conservativeness", batch.schedule_conservativeness),
        ("--mem-fraction-static", batch.mem_fraction_static),
        ("--cuda-graph-max-bs-decode", cuda_graph_max_bs(spec)),
        ("--page-size", batch.page_size),
        ("--stream-interval", batch.stream_interval),
    )
    args = _valued(valued)
    if not batch.radix_cache:
        args.append("--disable-radix-cache")
    if batch.mixed_chunk:
        args.append("--enable-mixed-chunk")
    return args


def _quantization_args(spec: RuntimeSpec) -> list[str]:
    quant = spec.quantization
    args = []
    if quant.method:
        args += ["--quantization", quant.method]
        if (
            quant.method == "nvfp4_online"
            and "--moe-runner-backend" not in spec.runtime.extra_flags
        ):
            # nvfp4_online only runs on the TRT-LLM MoE runner (SGLANG.md section 1.5).
            args += ["--moe-runner-backend", "flashinfer_trtllm"]
    if quant.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", quant.kv_cache_dtype]
    return args


def _speculator_args(spec: RuntimeSpec) -> list[str]:
    speculator = spec.speculator
    if not speculator.enabled:
        return []
    args = ["--speculative-algorithm", _ALGORITHM_FLAG[speculator.algorithm]]
    if speculator.draft_model and speculator.algorithm in {"EAGLE", "EAGLE3", "STANDALONE"}:
        args += ["--speculative-draft-model-path", speculator.draft_model]
        if speculator.draft_model_revision:
            args += ["--speculative-draft-model-revision", speculator.draft_model_revision]
    uses_tree = speculator.algorithm != "NGRAM"
    valued = (
        ("--speculative-num-steps", speculator.num_steps if uses_tree else None),
        ("--speculative-eagle-topk", speculator.eagle_topk if uses_tree else None),
        ("--speculative-num-draft-tokens", speculator.num_draft_tokens),
    )
    args += _valued(valued)
    if speculator.algorithm == "NGRAM":
        args += _ngram_args(spec)
    return args


def _ngram_args(spec: RuntimeSpec) -> list[str]:
    ngram = spec.speculator.ngram
    valued = (
        ("--speculative-ngram-min-bfs-breadth", ngram.min_bfs_breadth),
        ("--speculative-ngram-max-bfs-breadth", ngram.max_bfs_breadth),
        ("--speculative-ngram-match-type", ngram.match_type),
        ("--speculative-ngram-max-trie-depth", ngram.max_trie_depth),
        ("--speculative-ngram-capacity", ngram.capacity),
    )
    return _valued(valued)


# Where the file storage tier is mounted in the engine (SGLang reads the directory from
# SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR, default /tmp/hicache).
HICACHE_STORAGE_PATH = "/var/lib/plinth/hicache"
HICACHE_STORAGE_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"


def _hicache_args(spec: RuntimeSpec) -> list[str]:
    """SGLang's HiCache flags for `kv_cache.tiers`, every setting spelled out (SGLang's
    defaults may move between releases; a deployed endpoint's must not)."""
    tiers = spec.kv_cache.tiers
    host = tiers.host
    if host is None:
        return []
    args = ["--enable-hierarchical-cache"]
    if host.size_gb is not None:
        args += ["--hicache-size", str(host.size_gb)]
    else:
        args += ["--hicache-ratio", str(host.resolved_ratio)]
    args += ["--hicache-write-policy", host.resolved_write_policy]
    args += ["--hicache-io-backend", host.resolved_io_backend]
    args += ["--hicache-mem-layout", host.resolved_mem_layout]
    storage = tiers.storage
    if storage is not None:
        args += ["--hicache-storage-backend", storage.backend]
        args += ["--hicache-storage-prefetch-policy", storage.resolved_prefetch_policy]
        if storage.backend == "mooncake":
            args += ["--hicache-storage-backend-extra-config", _mooncake_config(spec)]
    return args


def _mooncake_config(spec: RuntimeSpec) -> str:
    """The Mooncake store's connection settings as SGLang's extra-config JSON takes them."""
    storage = spec.kv_cache.tiers.storage
    assert storage is not None
    config = {
        "master_server_address": storage.master_address,
        "metadata_server": storage.metadata_server,
        "protocol": storage.resolved_protocol,
    }
    if storage.device_name:
        config["device_name"] = storage.device_name
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def _kv_storage_mount(spec: RuntimeSpec) -> KvStorageMount | None:
    storage = spec.kv_cache.tiers.storage
    if storage is None or storage.backend != "file":
        return None
    return KvStorageMount(node_path=storage.node_path, claim=storage.claim)


def host_tier_gib_per_node(spec: RuntimeSpec, group: EngineGroup) -> int:
    """GiB of host memory one node of `group` pins for HiCache (0 without a host tier or when
    the model's size is unknown and no size is given)."""
    host = spec.kv_cache.tiers.host
    if host is None:
        return 0
    if host.size_gb is not None:
        return math.ceil(host.size_gb * 1e9 * group.gpus_per_node / GIB)
    arch = spec.model.arch()
    if arch is None:
        return 0
    fit = memory_fit(spec, get_gpu(spec.hardware.gpu), arch, group)
    return math.ceil(host_memory_per_node(fit, group) / GIB)


def _disaggregation_args(spec: RuntimeSpec, role: str) -> list[str]:
    if role == "engine":
        return []
    pd = spec.disaggregation
    args = ["--disaggregation-mode", role]
    args += ["--disaggregation-transfer-backend", pd.transfer_backend]
    # Both sides get the same bootstrap port: a decode server falls back to its own value when a
    # request carries none.
    args += ["--disaggregation-bootstrap-port", str(pd.bootstrap_port)]
    if pd.ib_device:
        args += ["--disaggregation-ib-device", pd.ib_device]
    if role == "decode" and pd.decode_radix_cache:
        args.append("--disaggregation-decode-enable-radix-cache")
    return args


def _extra_args(spec: RuntimeSpec, taken: set[str]) -> list[str]:
    catalog = sglang_flags(spec.runtime.sglang_version)
    args: list[str] = []
    for flag in sorted(spec.runtime.extra_flags):
        if flag not in taken:
            args += flag_argv(flag, spec.runtime.extra_flags[flag], catalog)
    return args


def engine_args(spec: RuntimeSpec, group: EngineGroup, labels: dict[str, str] | None) -> list[str]:
    """The SGLang flags of one engine group (no entrypoint)."""
    args = _model_args(spec) + _serving_args(labels) + _parallel_args(group)
    args += _batching_args(spec) + _quantization_args(spec) + _speculator_args(spec)
    args += _disaggregation_args(spec, group.role) + _hicache_args(spec) + lora_args(spec.lora)
    if spec.autoscaling.warm_replicas:
        # A warm replica's weights and KV cache leave the GPU on /release_memory_occupation
        # and come back on /resume_memory_occupation; SGLang serves both only with this flag.
        args.append("--enable-memory-saver")
    return args + _extra_args(spec, {a for a in args if a.startswith("--")})


def startup_allowance_s(spec: RuntimeSpec) -> int:
    """Seconds to allow for download, load and CUDA-graph capture: ~3 s per GiB, 10 to 60 min."""
    arch = spec.model.arch()
    if arch is None:
        return 1800
    weights_gib = model_weight_bytes(spec, arch) / GIB
    return int(min(3600, max(600, 600 + 3 * weights_gib)))


def engine_probes(spec: RuntimeSpec) -> tuple[Probe, Probe, Probe]:
    """Startup and readiness on /ready (503 until warm-up is done), liveness on /health.

    /health runs a one-token generation that SGLang itself times out after 20 s, so liveness
    waits longer than that before calling a busy engine dead.
    """
    period = 10
    startup = Probe(
        path="/ready",
        port=ENGINE_PORT,
        period_s=period,
        timeout_s=5,
        failure_threshold=math.ceil(startup_allowance_s(spec) / period),
    )
    readiness = Probe(path="/ready", port=ENGINE_PORT, period_s=10, timeout_s=5)
    liveness = Probe(path="/health", port=ENGINE_PORT, period_s=30, timeout_s=30)
    return startup, readiness, liveness


def shm_size_gib(group: EngineGroup) -> int:
    """Shared memory for NCCL and SGLang's IPC: 8 GiB plus 4 per local GPU, at most 64."""
    return min(64, 8 + 4 * group.gpus_per_node)


def engine_role(spec: RuntimeSpec, group: EngineGroup, labels: dict[str, str] | None) -> RolePlan:
    startup, readiness, liveness = engine_probes(spec)
    extra_ports = {"dist_init": DIST_INIT_PORT} if group.nodes > 1 else {}
    if group.role == "prefill":
        extra_ports["bootstrap"] = spec.disaggregation.bootstrap_port
    return RolePlan(
        role=group.role,
        image=spec.runtime.engine_image,
        command=list(ENGINE_COMMAND),
        args=engine_args(spec, group, labels),
        env=_engine_env(spec),
        port=ENGINE_PORT,
        metrics_port=ENGINE_PORT,  # --enable-metrics serves /metrics on the HTTP port
        extra_ports=extra_ports,
        gpus_per_node=group.gpus_per_node,
        nodes_per_replica=group.nodes,
        replicas=group.replicas_initial,
        shm_size_gib=shm_size_gib(group),
        startup_probe=startup,
        readiness_probe=readiness,
        liveness_probe=liveness,
        drain_seconds=ENGINE_DRAIN_SECONDS,
        served_model_name=spec.served_model_name,
        host_tier_gib_per_node=host_tier_gib_per_node(spec, group),
        kv_storage=_kv_storage_mount(spec),
    )


def _engine_env(spec: RuntimeSpec) -> dict[str, str]:
    env = dict(spec.runtime.env)
    if _kv_storage_mount(spec) is not None:
        env[HICACHE_STORAGE_ENV] = HICACHE_STORAGE_PATH
    return dict(sorted(env.items()))


# How long an idle routing key stays pinned (smg's default is 4 hours). An engine's cache turns
# over in minutes under load (smg assumes 180 s, `--cache-ttl-secs`), so a key idle longer has
# little left to find; placing it afresh lets keys spread onto replicas added since.
ROUTING_KEY_IDLE_SECONDS = 600


def gateway_places(policy: RoutingPolicy, placement: RoutingPlacement, split: bool) -> bool:
    """Whether the gateway names each request's replica (`gateway.placement`), not the router.

    cache_aware placed by_count, on a pool of regular replicas. A P/D split has two pools per
    request, which one slot cannot name: its router places keys itself (`smg_policy`).
    """
    return policy == "cache_aware" and placement == "by_count" and not split


def smg_policy(policy: RoutingPolicy, knobs: RoutingDefaults, split: bool = False) -> str:
    """The smg `--policy` of a spec's routing.

    cache_aware placed by_count: `consistent_hashing`, which sends a request to the replica the
    gateway named (`x-smg-target-worker`), and one that names none by its routing key's hash.
    On a P/D split, smg's `manual`: each key pinned to the prefill and the decode replica with
    the fewest keys in flight (`min_group`; smg counts keys in flight, not keys placed).
    """
    if policy != "cache_aware" or knobs.placement != "by_count":
        return policy
    return "manual" if split else "consistent_hashing"


def cache_aware_args(knobs: RoutingDefaults, split: bool = False) -> list[str]:
    """smg flags of cache-aware routing with `knobs`, always spelled out (policy: `smg_policy`).

    by_count: the router reads the gateway's routing key (`runtime.routing_key`), by which it
    places a request that names no replica (and, on a P/D split, every request: min_group,
    pinned until idle `ROUTING_KEY_IDLE_SECONDS` or its worker goes); without a split, smg's
    retries are off (the gateway's own go to another replica). first_fit: every knob of
    smg's cache-aware tree. Always explicit, never left to smg: its defaults move requests off
    the replica holding their prefix (bench/routing.py), and a new smg release could change
    them under a deployed endpoint.
    """
    if knobs.placement == "by_count":
        args = ["--routing-key-headers", ROUTING_KEY_HEADER]
        if split:
            args += ["--assignment-mode", "min_group"]
            args += ["--max-idle-secs", str(ROUTING_KEY_IDLE_SECONDS)]
        else:
            # The gateway sends a request that reached no engine to another replica
            # (`gateway.app`). smg's retries go to the replica the request named, so they never
            # help a dead one; and they send again a request its engine died under, after
            # which smg's answer (the last try's failed connection) no longer tells the gateway
            # that the request may have run.
            args.append("--disable-retries")
        return args
    args = ["--cache-threshold", str(knobs.cache_threshold)]
    args += ["--balance-abs-threshold", str(knobs.balance_abs_threshold)]
    args += ["--balance-rel-threshold", str(knobs.balance_rel_threshold)]
    if knobs.overload_protection:
        args.append("--worker-overload-protection")
    else:
        args.append("--disable-worker-overload-protection")
    args += ["--worker-warmup-secs", str(knobs.warmup_seconds)]
    if not knobs.warmup_seconds:
        # Diversion to a warming replica has its own knob; off too, not left to a zero window.
        args += ["--worker-warmup-divert-every", "0"]
    return args


def router_args(spec: RuntimeSpec) -> list[str]:
    """smg flags, without worker URLs or discovery (the driver adds those)."""
    route = spec.routing
    args = ["--host", "0.0.0.0", "--port", str(ROUTER_PORT)]  # noqa: S104
    if spec.disaggregation.enabled:
        args.append("--pd-disaggregation")
    knobs, split = route.resolved(), spec.disaggregation.enabled
    # In P/D mode --policy is both pools' policy: each pool keeps one key on one replica.
    args += ["--policy", smg_policy(route.policy, knobs, split)]
    if route.policy == "cache_aware":
        args += cache_aware_args(knobs, split)
    args += ["--prometheus-host", "0.0.0.0", "--prometheus-port", str(ROUTER_METRICS_PORT)]  # noqa: S104
    args += ["--health-check-interval-secs", str(ROUTER_HEALTH_CHECK_SECONDS)]
    return args


def _router_readiness_path(spec: RuntimeSpec) -> str:
    # smg's /readiness fails while no worker is healthy. A scale-to-zero endpoint must keep its
    # router reachable with no workers, or the gateway's wake-up request would never arrive.
    return "/liveness" if spec.autoscaling.scale_to_zero else "/readiness"


def router_role(spec: RuntimeSpec) -> RolePlan:
    return RolePlan(
        role="router",
        image=spec.runtime.router_image or ROUTER_IMAGE,
        command=list(ROUTER_COMMAND),
        args=router_args(spec),
        env={},
        port=ROUTER_PORT,
        metrics_port=ROUTER_METRICS_PORT,
        extra_ports={},
        gpus_per_node=0,
        nodes_per_replica=1,
        replicas=1,
        shm_size_gib=None,
        startup_probe=None,
        readiness_probe=Probe(path=_router_readiness_path(spec), port=ROUTER_PORT, period_s=5),
        liveness_probe=Probe(path="/liveness", port=ROUTER_PORT, period_s=10, timeout_s=5),
        drain_seconds=ROUTER_DRAIN_SECONDS,
        served_model_name=spec.served_model_name,
    )


def plan(spec: RuntimeSpec, *, deployment_labels: dict[str, str] | None = None) -> LaunchPlan:
    """The LaunchPlan of `spec`: engine roles in launch order, then the router.

    `deployment_labels` become `--extra-metric-labels` so every engine metric names its endpoint.
    Call `runtime.validate.validate` first: a plan of an invalid spec is not meant to run.
    """
    groups = engine_groups(spec)
    roles = [engine_role(spec, group, deployment_labels) for group in groups]
    roles.append(router_role(spec))
    engines = sglang_flags(spec.runtime.sglang_version)
    for role in roles:
        refuse_unsafe_args(role.role, role.args, smg_flags() if role.role == "router" else engines)
    return LaunchPlan(roles=roles)


def refuse_unsafe_args(role: str, args: Sequence[str], catalog: FlagCatalog) -> None:
    """Raise `UnsafeArgvError` unless every flag of `args` is a canonical flag of `catalog`, given
    once (unless it is a repeatable one) with as many values as it takes, and no value would parse
    as a flag or holds a control character. Value types and choices are validation's to report,
    not a safety matter."""
    seen: set[str] = set()
    for flag, values in split_argv(args):
        known = catalog.get(flag)
        if known is None or known.flag != flag:
            shown = flag or values[0]
            raise UnsafeArgvError("runtime", f"{role}: {shown!r} is not a flag of {catalog.name}")
        if flag in seen and known.kind not in {"append", "extend"}:
            raise UnsafeArgvError("runtime", f"{role}: {flag} is given more than once")
        seen.add(flag)
        # A value that is itself a known flag splits off here and leaves this one short.
        arity = arity_problem(known, len(values))
        if arity is not None:
            raise UnsafeArgvError("runtime", f"{role}: {flag} {arity}")
        for value in values:
            _refuse_token(value, is_flag=False)
