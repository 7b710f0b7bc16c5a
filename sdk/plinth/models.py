"""Typed models of the Plinth API, generated from /api/v1/openapi.json: do not edit.

Regenerate with ``python sdk/generate_models.py openapi.json > sdk/plinth/models.py``. Models
accept fields a newer server adds (``extra="allow"``) so an older SDK keeps working.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, cast
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field


class ApiModel(BaseModel):
    """Base of every generated model."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, validate_default=True)


class AbortIn(ApiModel):
    "AbortIn"

    reason: str = ''


class AccuracyOut(ApiModel):
    "AccuracyOut"

    metric: Literal['ttft', 'itl', 'throughput']
    predicted: float
    measured: float
    correction: float
    fitted: float
    band: list[float]
    samples: int
    source: Literal['autoscaler', 'samples', 'benchmark']
    summary: str


class AccuracyQuery(ApiModel):
    "AccuracyQuery"

    revision: int | None = None


class AdapterIn(ApiModel):
    "AdapterIn"

    name: str
    source: str
    revision: str | None = None
    rank: int
    pinned: bool = False
    message: str = ''


class AdapterOut(ApiModel):
    "AdapterOut"

    name: str
    source: str
    revision: str | None
    rank: int
    pinned: bool
    serving: bool
    requests_hour: int
    tokens_hour: int
    requests_day: int
    tokens_day: int


class AdapterTrafficOut(ApiModel):
    "AdapterTrafficOut"

    requests_hour: int
    tokens_hour: int
    requests_day: int
    tokens_day: int


class AdaptersOut(ApiModel):
    "AdaptersOut"

    target_revision: int | None
    serving_revision: int | None
    served_name: str
    adapters: list[AdapterOut]
    base: AdapterTrafficOut


class AiperfFromIndex(ApiModel):
    "AIPerf installed with pip from ``index_url`` by every benchmark Job (about 1.2 GB)."

    type: Literal['pip'] = 'pip'
    index_url: str
    image: str = 'python:3.11.11-slim-bookworm'


class AiperfImage(ApiModel):
    "AIPerf from an image with ``aiperf`` on its PATH: benchmark Jobs install nothing."

    type: Literal['image'] = 'image'
    image: str | None = None


class ApiKeyCreatedOut(ApiModel):
    "ApiKeyCreatedOut"

    id: UUID
    name: str
    kind: str
    role: str
    prefix: str
    allowed_deployment_ids: list[UUID]
    allowed_adapters: list[str]
    requests_per_minute: int | None
    tokens_per_minute: int | None
    priority: str
    weight: int
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    active: bool
    key: str


class ApiKeyIn(ApiModel):
    "ApiKeyIn"

    name: str
    kind: str
    role: str = 'developer'
    allowed_deployment_ids: list[UUID] = Field(default_factory=lambda: [])
    allowed_adapters: list[str] = Field(default_factory=lambda: [])
    expires_at: datetime | None = None
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    priority: Literal['critical', 'standard', 'batch'] = 'standard'
    weight: int = 1


class ApiKeyLimitsIn(ApiModel):
    "ApiKeyLimitsIn"

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    priority: Literal['critical', 'standard', 'batch'] | None = None
    weight: int | None = None


class ApiKeyOut(ApiModel):
    "ApiKeyOut"

    id: UUID
    name: str
    kind: str
    role: str
    prefix: str
    allowed_deployment_ids: list[UUID]
    allowed_adapters: list[str]
    requests_per_minute: int | None
    tokens_per_minute: int | None
    priority: str
    weight: int
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    active: bool


class ApiKeyPage(ApiModel):
    "ApiKeyPage"

    items: list[ApiKeyOut]
    count: int
    next: str | None = None


class Architecture(ApiModel):
    "The numbers of a model that is not in the catalogue (from its config.json)."

    architecture: str = 'LlamaForCausalLM'
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    params_b: float
    active_params_b: float | None = None
    max_context: int
    has_mtp: bool = False
    num_experts: int | None = None
    sliding_window_layers: int = 0
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    checkpoint_bytes_per_param: float = 2.0


class ArtifactOut(ApiModel):
    "ArtifactOut"

    id: str
    path: str
    quantization: str
    source_model: str
    run: str
    candidate: str
    recipe: dict[str, Any]
    tool: dict[str, Any]
    calibration_sha256: str
    mean_kl: float
    top1: float
    created_at: datetime


class ArtifactPage(ApiModel):
    "ArtifactPage"

    items: list[ArtifactOut]
    count: int
    next: str | None = None


class AuditEventOut(ApiModel):
    "AuditEventOut"

    id: int
    created_at: datetime
    actor: str
    action: str
    target_type: str
    target_id: str
    target_repr: str
    before: Any
    after: Any


class AuditPage(ApiModel):
    "AuditPage"

    items: list[AuditEventOut]
    count: int
    next: str | None = None


class AuditQuery(ApiModel):
    "AuditQuery"

    limit: int = 50
    offset: int = 0
    action: str | None = None
    actor: str | None = None
    since: datetime | None = None
    target_id: str | None = None


class AutoscalingSettings(ApiModel):
    "Two policies: in-flight requests per replica (``concurrency_target``), or, when ``slo`` is"

    min_replicas: int = 1
    max_replicas: int = 1
    concurrency_target: int = 32
    target_utilization: float = 0.7
    window_seconds: int = 60
    scale_down_delay_seconds: int = 300
    scale_to_zero: bool = False
    scale_to_zero_after_seconds: int = 900
    prestage_weights: bool = False
    warm_replicas: int = 0
    slo: SloTargets | None = None
    prefill: PoolBounds | None = None
    decode: PoolBounds | None = None


class BatchingSettings(ApiModel):
    "None means \"let SGLang choose\" (it sizes most of these from GPU memory)."

    max_running_requests: int | None = None
    max_prefill_tokens: int | None = None
    chunked_prefill_size: int | None = None
    schedule_policy: Literal['fcfs', 'lpm', 'random', 'dfs-weight', 'lof', 'priority', 'routing-key', 'hrrn', 'shortest-prefill-first'] | None = None
    schedule_conservativeness: float | None = None
    mem_fraction_static: float | None = None
    cuda_graph_max_bs_decode: int | None = None
    cuda_graph_trim: bool = False
    page_size: int | None = None
    radix_cache: bool = True
    mixed_chunk: bool = False
    stream_interval: int | None = None


class BenchmarkIn(ApiModel):
    "BenchmarkIn"

    profile: ProfileIn | None = None
    name: str = ''
    revision: int | None = None


class BenchmarkOut(ApiModel):
    "BenchmarkOut"

    id: str
    name: str
    revision: int
    status: str
    profile: ProfileOut
    results: list[PointOut]
    prediction: list[PredictionOut]
    served_revisions: list[int]
    runner: str
    tool: str
    error: str
    created_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class CalibrationSetIn(ApiModel):
    "CalibrationSetIn"

    name: str
    samples: str
    retention_days: int = 30


class CalibrationSetOut(ApiModel):
    "CalibrationSetOut"

    id: str
    name: str
    samples: int
    sha256: str
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    purged_at: datetime | None


class CalibrationSetPage(ApiModel):
    "CalibrationSetPage"

    items: list[CalibrationSetOut]
    count: int
    next: str | None = None


class CanaryOut(ApiModel):
    "CanaryOut"

    id: str
    revision: int
    baseline_revision: int
    weight: int
    sticky: bool
    replicas: int
    ready_replicas: int
    status: str
    reason: str
    thresholds: ThresholdsOut
    gate_verdict: dict[str, Any] | None
    started_by: str
    started_at: datetime
    ended_at: datetime | None
    traffic: TrafficOut | None


class CanaryStartIn(ApiModel):
    "CanaryStartIn"

    spec: RuntimeSpec
    weight: int
    sticky: bool = False
    replicas: int = 1
    thresholds: ThresholdsIn | None = None
    message: str = ''


class CandidateOut(ApiModel):
    "CandidateOut"

    label: str
    spec: dict[str, Any]
    predicted: PredictedOut
    features: list[str]
    reasons: list[str]
    warnings: list[IssueOut]
    measured: MeasuredOut | None = None


class ClaimCache(ApiModel):
    "An existing PersistentVolumeClaim in the namespace (ReadWriteMany so every node shares"

    type: Literal['claim'] = 'claim'
    claim_name: str


class ClusterIn(ApiModel):
    "ClusterIn"

    name: str
    kind: str = 'kubernetes'
    namespace: str = 'plinth'
    kubeconfig_secret_id: str
    settings: ClusterSettings | None = None


class ClusterOut(ApiModel):
    "ClusterOut"

    id: UUID
    name: str
    kind: str
    namespace: str
    shared: bool
    created_at: datetime
    gpu_inventory: InventoryOut | None
    settings: ClusterSettings | None
    available: bool = True
    unavailable_since: datetime | None = None
    unavailable_reason: str = ''
    last_seen_at: datetime | None = None
    draining: bool = False


class ClusterPage(ApiModel):
    "ClusterPage"

    items: list[ClusterOut]
    count: int
    next: str | None = None


class ClusterPatch(ApiModel):
    "ClusterPatch"

    namespace: str | None = None
    settings: ClusterSettings | None = None


class ClusterRef(ApiModel):
    "ClusterRef"

    id: UUID
    name: str
    kind: str


class ClusterSettings(ApiModel):
    "Per-cluster choices an operator makes once, rendered into every endpoint's manifests."

    gpu_map: dict[str, GpuSelector] | None = None
    gpu_resource: str = 'nvidia.com/gpu'
    gpu_tolerations: list[Toleration] = Field(default_factory=lambda: [Toleration.model_validate(v) for v in [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'value': None, 'effect': 'NoSchedule', 'toleration_seconds': None}]])
    topology_label: str | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] = Field(default_factory=lambda: [])
    priority_class_name: str | None = None
    runtime_class_name: str | None = None
    service_account_name: str | None = None
    image_pull_secrets: list[str] = Field(default_factory=lambda: [])
    engine_images: dict[str, str] | None = None
    router_image: str | None = None
    model_cache: HostPathCache | ClaimCache | SharedClaimCache | NoCache | None = None
    benchmark_aiperf: AiperfImage | AiperfFromIndex | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    platform_namespace: str = 'plinth-system'
    monitoring_namespace: str | None = None
    engine_run_as_user: int | None = None
    read_only_root: bool = True
    tenant_overrides: list[Literal['engine_image', 'router_image', 'env', 'extra_flags']] = Field(default_factory=lambda: cast("list[Literal['engine_image', 'router_image', 'env', 'extra_flags']]", ['engine_image', 'router_image', 'env', 'extra_flags']))
    router_address: str | None = None
    gpu_price_factor: float = 1.0


class CompareOut(ApiModel):
    "CompareOut"

    a: BenchmarkOut
    b: BenchmarkOut
    points: list[ComparedPointOut]


class CompareQuery(ApiModel):
    "CompareQuery"

    a: str
    b: str


class ComparedPointOut(ApiModel):
    "ComparedPointOut"

    kind: str
    value: float
    metrics: dict[str, DeltaOut]


class CorrectionOut(ApiModel):
    "CorrectionOut"

    deployment: str
    revision: int
    factors: dict[str, float]


class CostQuery(ApiModel):
    "CostQuery"

    by: str = 'endpoint'
    month: str | None = None
    format: str | None = None


class CostRowOut(ApiModel):
    "CostRowOut"

    label: str
    endpoint: str
    revision: int | None
    adapter: str
    api_key_id: UUID | None
    api_key_prefix: str
    tokens: int
    gpu_hours: float
    cost: float


class CostsOut(ApiModel):
    "CostsOut"

    month: str
    by: str
    start: datetime
    end: datetime
    currency: str = 'USD'
    gpu_hours: float
    cost: float
    rows: list[CostRowOut]


class DeltaOut(ApiModel):
    "DeltaOut"

    a: float
    b: float
    delta: float
    pct: float | None


class DeploymentCreateIn(ApiModel):
    "DeploymentCreateIn"

    slug: str
    name: str = ''
    spec: RuntimeSpec
    cluster_id: UUID | None = None
    replicas: int | None = None
    message: str = ''
    labels: dict[str, str] | None = None


class DeploymentDetailOut(ApiModel):
    "DeploymentDetailOut"

    id: UUID
    slug: str
    name: str
    labels: dict[str, str] | None = None
    status: str
    settled: bool
    desired_state: str
    desired_replicas: int
    ready_replicas: int
    target_revision: int | None
    current_revision: int | None
    generation: int
    observed_generation: int
    failure_reason: str
    cluster: ClusterRef
    url: str
    created_at: datetime
    updated_at: datetime
    spec: dict[str, Any]
    pools: list[PoolOut] | None = None
    warnings: list[dict[str, Any]]
    placement_policy: str = 'cheapest'
    placements: list[PlacedOn] | None = None


class DeploymentFilters(ApiModel):
    "DeploymentFilters"

    limit: int = 50
    offset: int = 0
    status: str | None = None
    search: str | None = None
    cluster: str | None = None
    label: list[str] | None = None


class DeploymentOut(ApiModel):
    "DeploymentOut"

    id: UUID
    slug: str
    name: str
    labels: dict[str, str] | None = None
    status: str
    settled: bool
    desired_state: str
    desired_replicas: int
    ready_replicas: int
    target_revision: int | None
    current_revision: int | None
    generation: int
    observed_generation: int
    failure_reason: str
    cluster: ClusterRef
    url: str
    created_at: datetime
    updated_at: datetime


class DeploymentPage(ApiModel):
    "DeploymentPage"

    items: list[DeploymentOut]
    count: int
    next: str | None = None


class DiffOut(ApiModel):
    "DiffOut"

    from_revision: int
    to_revision: int
    changes: list[FieldChangeOut]


class DiffQuery(ApiModel):
    "DiffQuery"

    from_: int = Field(alias='from')
    to: int


class DisaggregationSettings(ApiModel):
    "DisaggregationSettings"

    enabled: bool = False
    prefill: PoolSettings = Field(default_factory=lambda: PoolSettings.model_validate({'replicas': 1, 'tp': None}))
    decode: PoolSettings = Field(default_factory=lambda: PoolSettings.model_validate({'replicas': 1, 'tp': None}))
    transfer_backend: Literal['mooncake', 'mooncake_tcp', 'nixl', 'mori', 'fake'] = 'mooncake'
    bootstrap_port: int = 8998
    ib_device: str | None = None
    decode_radix_cache: bool = False


class DrainOut(ApiModel):
    "DrainOut"

    cluster: str
    draining: bool
    draining_since: datetime | None
    endpoints: int


class ErrorDetailOut(ApiModel):
    "ErrorDetailOut"

    code: str
    message: str
    fields: list[FieldErrorOut] = Field(default_factory=lambda: [])


class ErrorOut(ApiModel):
    "ErrorOut"

    error: ErrorDetailOut


class Estimate(ApiModel):
    "The figures the create form shows as a person types."

    gpu: str
    model_known: bool
    context_length: int | None
    weights_gib: float | None
    kv_cache_gib: float | None
    reserve_gib: float | None
    total_gib: float | None
    capacity_gib: float
    mem_fraction_static: float | None
    adapters_gib: float | None = None
    max_concurrent_tokens: int | None
    concurrent_requests: int | None = None
    max_running_requests: int | None = None
    gpus_per_replica: int
    total_gpus_min: int
    total_gpus_max: int
    price_per_gpu_hour: float
    cost_per_replica_hour: float
    cost_per_hour_min: float
    cost_per_hour_max: float
    fits: bool
    groups: list[GroupEstimate]


class EventOut(ApiModel):
    "EventOut"

    id: int
    created_at: datetime
    level: str
    reason: str
    message: str
    revision_number: int | None
    data: dict[str, Any]


class EventPage(ApiModel):
    "EventPage"

    items: list[EventOut]
    count: int
    next: str | None = None


class EventQuery(ApiModel):
    "EventQuery"

    limit: int = 50
    offset: int = 0
    level: str | None = None


class FieldChangeOut(ApiModel):
    "FieldChangeOut"

    path: str
    before: Any | None = None
    after: Any | None = None
    added: bool = False
    removed: bool = False


class FieldErrorOut(ApiModel):
    "FieldErrorOut"

    field: str
    code: str
    message: str
    fix: str | None = None


class GateIn(ApiModel):
    "GateIn"

    max_mean_kl: float | int = 0.05
    min_top1_agreement: float | int = 0.95
    prompts_jsonl: str = ''
    max_new_tokens: int = 64


class GateOut(ApiModel):
    "GateOut"

    id: str
    revision: int
    baseline_revision: int
    status: str
    max_mean_kl: float
    min_top1_agreement: float
    max_new_tokens: int
    prompt_set: str
    prompts: int
    results: dict[str, Any] | None
    error: str
    override_reason: str
    overridden_by: str
    created_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class GatePage(ApiModel):
    "GatePage"

    items: list[GateOut]
    count: int
    next: str | None = None


class GpuNodeOut(ApiModel):
    "GpuNodeOut"

    name: str
    gpu: str
    product: str
    allocatable: int
    allocated: int
    schedulable: bool


class GpuSelector(ApiModel):
    "The nodes that hold one GPU type: ``label`` set to one of ``values``."

    label: str = 'nvidia.com/gpu.product'
    values: list[str]


class GpuTotalsOut(ApiModel):
    "GpuTotalsOut"

    nodes: int
    gpus: int
    free: int


class GpuType(ApiModel):
    "One GPU model as the memory and cost arithmetic sees it (dense figures, usable memory)."

    id: str
    name: str
    aliases: list[str] = Field(default_factory=lambda: [])
    memory_gib: float
    compute_capability: str
    hbm_bandwidth_gbs: float
    host_link_gbs: float
    node_host_memory_gib: float
    bf16_tflops: float
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    gpus_per_node: int
    price_per_gpu_hour: float
    gpu_products: list[str]
    sm: int


class GroupEstimate(ApiModel):
    "One engine group (engine, prefill or decode): memory of one of its GPUs, in GiB."

    role: str
    gpus_per_replica: int
    nodes_per_replica: int
    replicas_min: int
    replicas_max: int
    weights_gib: float | None = None
    kv_cache_gib: float | None = None
    reserve_gib: float | None = None
    adapters_gib: float | None = None
    total_gib: float | None = None
    capacity_gib: float
    mem_fraction_static: float | None = None
    kv_bytes_per_token: float | None = None
    max_kv_tokens: int | None = None
    max_concurrent_tokens: int | None = None
    concurrent_requests: int | None = None
    fits: bool


class HardwareSettings(ApiModel):
    "HardwareSettings"

    gpu: str
    gpus_per_replica: int | None = None
    nodes_per_replica: int | None = None
    price_per_gpu_hour: float | None = None


class HostPathCache(ApiModel):
    "Each node caches weights on its own disk: downloaded once per node."

    type: Literal['host_path'] = 'host_path'
    path: str = '/var/lib/plinth/model-cache'


class HostTier(ApiModel):
    "HiCache's host-memory tier (`--enable-hierarchical-cache`): prefixes the GPU's KV pool"

    ratio: float | None = None
    size_gb: int | None = None
    write_policy: Literal['write_through', 'write_through_selective', 'write_back'] | None = None
    io_backend: Literal['kernel', 'direct'] | None = None
    mem_layout: Literal['layer_first', 'page_first', 'page_first_direct', 'page_first_kv_split', 'page_head'] | None = None


class InventoryOut(ApiModel):
    "InventoryOut"

    nodes: list[GpuNodeOut]
    gpus: dict[str, GpuTotalsOut]
    error: str
    observed_at: datetime | None


class InvitationOut(ApiModel):
    "InvitationOut"

    id: UUID
    organization_id: UUID
    organization: str
    username: str
    role: str
    status: str
    created_at: datetime
    expires_at: datetime


class InvitationPage(ApiModel):
    "InvitationPage"

    items: list[InvitationOut]
    count: int
    next: str | None = None


class IssueOut(ApiModel):
    "IssueOut"

    field: str
    code: str
    message: str
    fix: str | None = None
    severity: str


class KvCacheSettings(ApiModel):
    "Where KV cache lives beyond the GPU: `tiers.host` (HiCache) and `tiers.storage`."

    tiers: KvTiers = Field(default_factory=lambda: KvTiers.model_validate({'host': None, 'storage': None}))


class KvTiers(ApiModel):
    "KvTiers"

    host: HostTier | None = None
    storage: StorageTier | None = None


class LatencyOut(ApiModel):
    "LatencyOut"

    p50: float
    p90: float
    p99: float


class LimitsIn(ApiModel):
    "LimitsIn"

    max_cost_per_hour: float | None = None
    max_gpus: int | None = None


class LogLineOut(ApiModel):
    "LogLineOut"

    ts: datetime | None
    text: str
    level: str = ''


class LogSourceOut(ApiModel):
    "LogSourceOut"

    name: str
    role: str
    restarts: int
    has_previous: bool


class LogsOut(ApiModel):
    "LogsOut"

    replica: str
    role: str
    previous: bool
    replicas: list[LogSourceOut]
    lines: list[LogLineOut]
    cursor: str
    continued: bool
    more: bool
    read: int


class LogsQuery(ApiModel):
    "LogsQuery"

    replica: str | None = None
    role: Literal['engine', 'prefill', 'decode', 'router'] | None = None
    tail: int = 200
    since: str | None = None
    previous: bool = False
    after: str | None = None
    q: str | None = None
    level: Literal['DEBUG', 'INFO', 'WARNING', 'ERROR'] | None = None


class LoraAdapter(ApiModel):
    "One LoRA adapter: its name, where its weights come from, and its rank."

    name: str
    source: str
    revision: str | None = None
    rank: int
    pinned: bool = False


class LoraSettings(ApiModel):
    "LoRA serving: fine-tunes of the base model, each addressed by name."

    enabled: bool = False
    adapters: list[LoraAdapter] | None = None
    max_loras_per_batch: int | None = None
    max_loaded_loras: int | None = None
    max_lora_rank: int | None = None
    target_modules: list[Literal['q_proj', 'k_proj', 'v_proj', 'o_proj', 'q_a_proj', 'kv_a_proj_with_mqa', 'q_b_proj', 'kv_b_proj', 'wq_b', 'wk', 'weights_proj', 'gate_proj', 'up_proj', 'down_proj', 'qkv_proj', 'gate_up_proj', 'embed_tokens', 'lm_head', 'qkvr', 'wo_ud', 'all']] | None = None
    backend: Literal['csgmv', 'triton', 'triton_v2', 'torch_native'] | None = None
    eviction_policy: Literal['lru', 'fifo'] | None = None


class MeasuredOut(ApiModel):
    "MeasuredOut"

    requests: int
    completed: int
    ttft_p90_s: float | None
    itl_p90_s: float | None
    e2e_p90_s: float | None
    tpot_mean_s: float | None
    output_tokens_per_s: float
    simulated_s: float
    meets_slo: bool


class MemberIn(ApiModel):
    "MemberIn"

    username: str
    role: str


class MemberOut(ApiModel):
    "MemberOut"

    id: int
    username: str
    role: str
    created_at: datetime


class MemberPage(ApiModel):
    "MemberPage"

    items: list[MemberOut]
    count: int
    next: str | None = None


class MetricOut(ApiModel):
    "MetricOut"

    ts: datetime
    interval_s: float
    replicas_ready: int
    requests_per_s: float
    tokens_per_s: float
    ttft_p50: float | None
    ttft_p90: float | None
    itl_p50: float | None
    itl_p90: float | None
    running: float
    queued: float
    kv_usage: float | None
    cache_hit_rate: float | None
    spec_accept_length: float | None
    revisions: dict[str, dict[str, float | None]] | None = None


class MetricsOut(ApiModel):
    "MetricsOut"

    start: datetime
    end: datetime
    truncated: bool
    samples: list[MetricOut]


class ModelAccuracyOut(ApiModel):
    "ModelAccuracyOut"

    revision: int | None
    at: datetime
    window_s: int
    modelled: bool
    rate_rps_per_replica: float | None
    correction: dict[str, float]
    figures: list[AccuracyOut]


class ModelArch(ApiModel):
    "What Plinth needs to know about a model's shape; also the form of an inline description."

    id: str
    hf_repo: str = ''
    aliases: list[str] = Field(default_factory=lambda: [])
    architecture: str = 'LlamaForCausalLM'
    num_layers: int
    hidden_size: int
    intermediate_size: int | None = None
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    params_b: float
    active_params_b: float = 0.0
    max_context: int
    has_mtp: bool = False
    num_experts: int | None = None
    experts_per_token: int | None = None
    sliding_window_layers: int = 0
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    checkpoint_quantization: str | None = None
    checkpoint_bytes_per_param: float = 2.0
    draft_algorithm: str | None = None
    draft_for: list[str] = Field(default_factory=lambda: [])


class ModelSettings(ApiModel):
    "ModelSettings"

    source: str
    revision: str | None = None
    served_name: str | None = None
    trust_remote_code: bool = False
    context_length: int | None = None
    dtype: Literal['auto', 'bfloat16', 'float16'] = 'auto'
    hf_token_secret: str | None = None
    architecture: Architecture | None = None


class NgramSettings(ApiModel):
    "NgramSettings"

    min_bfs_breadth: int | None = None
    max_bfs_breadth: int | None = None
    match_type: Literal['BFS', 'PROB'] | None = None
    max_trie_depth: int | None = None
    capacity: int | None = None


class NoCache(ApiModel):
    "No cache shared between pods: each engine downloads the weights itself when it starts,"

    type: Literal['none'] = 'none'


class OptimizeIn(ApiModel):
    "OptimizeIn"

    model: str
    architecture: Architecture | None = None
    gpus: list[str] | None = None
    traffic: TrafficIn = Field(default_factory=lambda: TrafficIn.model_validate({'input_tokens': 1024, 'output_tokens': 256, 'rate_rps': None, 'concurrency': None, 'prefix_share': 0.0, 'turns': 1, 'working_set_tokens': 0}))
    slo: SloIn = Field(default_factory=lambda: SloIn.model_validate({'ttft_p90_s': 1.0, 'itl_p90_s': None, 'e2e_p90_s': None, 'tpot_mean_s': None}))
    limits: LimitsIn = Field(default_factory=lambda: LimitsIn.model_validate({'max_cost_per_hour': None, 'max_gpus': None}))
    objective: Literal['cost', 'throughput'] = 'cost'
    cluster_id: str | None = None
    confirm: bool = False
    confirm_top: int = 3
    deployment_id: str | None = None


class OptimizeOut(ApiModel):
    "OptimizeOut"

    rate_rps: float
    evaluated: int
    best: CandidateOut | None
    ranked: list[CandidateOut]
    pareto: list[CandidateOut]
    waterfall: list[WaterfallOut]
    notes: list[str]
    correction: CorrectionOut | None = None


class OverrideIn(ApiModel):
    "OverrideIn"

    reason: str


class PageQuery(ApiModel):
    "PageQuery"

    limit: int = 50
    offset: int = 0


class ParallelismSettings(ApiModel):
    "Inside one replica. Data parallelism is `autoscaling` replicas behind the router."

    tp: int = 1
    pp: int = 1
    attn_dp: int = 1
    ep: int = 1
    moe_a2a: Literal['none', 'deepep'] = 'none'


class PhaseOut(ApiModel):
    "PhaseOut"

    phase: str
    seconds: float


class PlacedOn(ApiModel):
    "One cluster of an endpoint's placement."

    cluster: str
    cluster_id: str
    home: bool
    state: str
    min_replicas: int
    weight: int
    desired_replicas: int
    ready_replicas: int
    total_replicas: int
    retiring: bool
    unanswered_since: datetime | None = None


class PlacementClusterIn(ApiModel):
    "PlacementClusterIn"

    cluster: str
    min_replicas: int = 0
    weight: int = 1


class PlacementIn(ApiModel):
    "PlacementIn"

    policy: str
    clusters: list[PlacementClusterIn]


class PlacementOut(ApiModel):
    "PlacementOut"

    policy: str
    clusters: list[PlacedOn]


class PointOut(ApiModel):
    "PointOut"

    kind: str
    value: float
    requests: int
    errors: int
    duration_s: float
    output_tokens_per_s: float
    requests_per_s: float
    input_tokens_mean: float
    output_tokens_requested: int | None = None
    output_tokens_mean: float
    output_tokens_min: float | None = None
    off_length_answers: int | None = None
    empty_answers: int = 0
    latency_ms: dict[str, LatencyOut]
    error_summary: list[str]
    notes: list[str] | None = None


class PoolBounds(ApiModel):
    "How far the autoscaler may move one prefill or decode pool; it starts at the pool's size"

    min_replicas: int = 1
    max_replicas: int = 1


class PoolOut(ApiModel):
    "PoolOut"

    role: str
    desired: int
    ready: int
    present: int


class PoolSettings(ApiModel):
    "One side of a prefill/decode split; `tp` None means parallelism.tp."

    replicas: int = 1
    tp: int | None = None


class PredictedOut(ApiModel):
    "PredictedOut"

    rate_rps: float
    capacity_rps: float
    output_tokens_per_s: float
    tokens_per_s_per_gpu: float
    ttft_p90_s: float
    itl_p90_s: float
    e2e_p90_s: float
    gpus: int
    cost_per_hour: float
    meets_slo: bool


class PredictionOut(ApiModel):
    "PredictionOut"

    kind: str
    value: float
    ttft_p90_ms: float | None
    itl_p90_ms: float | None
    e2e_p90_ms: float | None
    requests_per_s: float
    output_tokens_per_s: float


class ProfileIn(ApiModel):
    "ProfileIn"

    input_tokens: int | None = None
    output_tokens: int | None = None
    concurrency: list[int] | None = None
    request_rate: float | int | None = None
    duration_s: int | None = None
    shared_prefix: float | int | None = None
    turns: int | None = None


class ProfileOut(ApiModel):
    "ProfileOut"

    input_tokens: int
    output_tokens: int
    concurrency: list[int]
    request_rate: float | None
    duration_s: int
    shared_prefix: float
    turns: int


class PromoteIn(ApiModel):
    "PromoteIn"

    message: str = ''


class QuantizationCandidateOut(ApiModel):
    "QuantizationCandidateOut"

    name: str
    recipe: dict[str, Any]
    mean_kl: float
    p99_kl: float | None
    top1: float
    quantized_fraction: float
    bits_per_weight: float
    quantization: str
    checkpoint: str
    price: dict[str, Any] | None
    artifact: str | None
    on_frontier: bool


class QuantizationCompareOut(ApiModel):
    "QuantizationCompareOut"

    baseline: str
    candidates: list[dict[str, Any]]


class QuantizationDeployIn(ApiModel):
    "QuantizationDeployIn"

    deployment: str
    candidate: str
    mode: Literal['canary', 'revision'] = 'canary'
    weight: int = 10


class QuantizationDeployOut(ApiModel):
    "QuantizationDeployOut"

    mode: str
    revision: int
    canary: str | None
    gate: str | None


class QuantizationRecipeIn(ApiModel):
    "QuantizationRecipeIn"

    name: str
    keep_bf16: list[str] | None = None
    formats: dict[str, str] | None = None


class QuantizationRunIn(ApiModel):
    "QuantizationRunIn"

    format: str
    source_model: str = ''
    deployment: str | None = None
    recipes: list[QuantizationRecipeIn] | None = None
    propose: bool = False
    calibration_set: str | None = None
    samples: int = 64
    max_seq_len: int = 512
    cluster: str | None = None
    gpu: str = ''
    gpus: int = 1
    name: str = ''


class QuantizationRunOut(ApiModel):
    "QuantizationRunOut"

    id: str
    name: str
    status: str
    phase: str
    phase_candidate: str
    source_model: str
    deployment: str | None
    format: str
    recipes: list[dict[str, Any]]
    propose: bool
    calibration_set: str | None
    samples: int
    max_seq_len: int
    cluster: str
    gpu: str
    gpus: int
    attempt: int
    sensitivity: list[dict[str, Any]]
    events: int
    candidates: list[QuantizationCandidateOut]
    gpu_seconds: float
    error: str
    created_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class QuantizationRunPage(ApiModel):
    "QuantizationRunPage"

    items: list[QuantizationRunOut]
    count: int
    next: str | None = None


class QuantizationSettings(ApiModel):
    "QuantizationSettings"

    method: str | None = None
    kv_cache_dtype: str = 'auto'


class QuotaIn(ApiModel):
    "QuotaIn"

    gpus: int | None = None
    gpus_by_type: dict[str, int] | None = None
    endpoints: int | None = None
    replicas_per_endpoint: int | None = None
    quantization_gpu_hours: int | None = None


class QuotaLineOut(ApiModel):
    "QuotaLineOut"

    quota: str
    limit: int | None
    in_use: int | float


class QuotaUsageOut(ApiModel):
    "QuotaUsageOut"

    organization_id: UUID
    quotas: list[QuotaLineOut]
    updated_at: datetime | None
    updated_by: str


class RangeQuery(ApiModel):
    "RangeQuery"

    start: datetime | None = None
    end: datetime | None = None


class ReplicaStartOut(ApiModel):
    "ReplicaStartOut"

    replica: str
    role: str
    revision: int | None
    created_at: datetime
    ready_at: datetime
    total_seconds: float
    phases: list[PhaseOut]


class ReplicaStartPage(ApiModel):
    "ReplicaStartPage"

    items: list[ReplicaStartOut]
    count: int
    next: str | None = None


class RevisionOut(ApiModel):
    "RevisionOut"

    number: int
    spec_hash: str
    author: str
    message: str
    rollback_of: int | None
    warnings: list[dict[str, Any]]
    created_at: datetime
    is_target: bool
    is_current: bool
    spec: dict[str, Any]


class RevisionPage(ApiModel):
    "RevisionPage"

    items: list[RevisionSummaryOut]
    count: int
    next: str | None = None


class RevisionSummaryOut(ApiModel):
    "RevisionSummaryOut"

    number: int
    spec_hash: str
    author: str
    message: str
    rollback_of: int | None
    warnings: list[dict[str, Any]]
    created_at: datetime
    is_target: bool
    is_current: bool


class RoleIn(ApiModel):
    "RoleIn"

    role: str


class RollbackIn(ApiModel):
    "RollbackIn"

    to_revision: int
    message: str = ''


class RoutingSettings(ApiModel):
    "The smg knobs that decide whether cache-aware routing keeps a prefix on its replica."

    policy: Literal['cache_aware', 'prefix_hash', 'round_robin', 'power_of_two', 'random'] = 'cache_aware'
    placement: Literal['by_count', 'first_fit'] | None = None
    cache_threshold: float | None = None
    balance_abs_threshold: int | None = None
    balance_rel_threshold: float | None = None
    overload_protection: bool = False
    warmup_seconds: int | None = None


class RuntimeSettings(ApiModel):
    "RuntimeSettings"

    sglang_version: str = '0.5.23'
    image: str | None = None
    router_image: str | None = None
    extra_flags: dict[str, bool | int | float | str] | None = None
    env: dict[str, str] | None = None


class RuntimeSpec(ApiModel):
    "All settings of one endpoint; only `model.source` and `hardware.gpu` are required."

    model: ModelSettings
    hardware: HardwareSettings
    parallelism: ParallelismSettings = Field(default_factory=lambda: ParallelismSettings.model_validate({'tp': 1, 'pp': 1, 'attn_dp': 1, 'ep': 1, 'moe_a2a': 'none'}))
    batching: BatchingSettings = Field(default_factory=lambda: BatchingSettings.model_validate({'max_running_requests': None, 'max_prefill_tokens': None, 'chunked_prefill_size': None, 'schedule_policy': None, 'schedule_conservativeness': None, 'mem_fraction_static': None, 'cuda_graph_max_bs_decode': None, 'cuda_graph_trim': False, 'page_size': None, 'radix_cache': True, 'mixed_chunk': False, 'stream_interval': None}))
    quantization: QuantizationSettings = Field(default_factory=lambda: QuantizationSettings.model_validate({'method': None, 'kv_cache_dtype': 'auto'}))
    speculator: SpeculatorSettings = Field(default_factory=lambda: SpeculatorSettings.model_validate({'algorithm': 'none', 'draft_model': None, 'draft_model_revision': None, 'num_steps': None, 'eagle_topk': None, 'num_draft_tokens': None, 'ngram': {'capacity': None, 'match_type': None, 'max_bfs_breadth': None, 'max_trie_depth': None, 'min_bfs_breadth': None}}))
    disaggregation: DisaggregationSettings = Field(default_factory=lambda: DisaggregationSettings.model_validate({'enabled': False, 'prefill': {'replicas': 1, 'tp': None}, 'decode': {'replicas': 1, 'tp': None}, 'transfer_backend': 'mooncake', 'bootstrap_port': 8998, 'ib_device': None, 'decode_radix_cache': False}))
    routing: RoutingSettings = Field(default_factory=lambda: RoutingSettings.model_validate({'policy': 'cache_aware', 'placement': None, 'cache_threshold': None, 'balance_abs_threshold': None, 'balance_rel_threshold': None, 'overload_protection': False, 'warmup_seconds': None}))
    autoscaling: AutoscalingSettings = Field(default_factory=lambda: AutoscalingSettings.model_validate({'min_replicas': 1, 'max_replicas': 1, 'concurrency_target': 32, 'target_utilization': 0.7, 'window_seconds': 60, 'scale_down_delay_seconds': 300, 'scale_to_zero': False, 'scale_to_zero_after_seconds': 900, 'prestage_weights': False, 'warm_replicas': 0, 'slo': None, 'prefill': None, 'decode': None}))
    runtime: RuntimeSettings = Field(default_factory=lambda: RuntimeSettings.model_validate({'sglang_version': '0.5.23', 'image': None, 'router_image': None, 'extra_flags': {}, 'env': {}}))
    kv_cache: KvCacheSettings = Field(default_factory=lambda: KvCacheSettings.model_validate({'tiers': {'host': None, 'storage': None}}))
    lora: LoraSettings = Field(default_factory=lambda: LoraSettings.model_validate({'enabled': False, 'adapters': [], 'max_loras_per_batch': None, 'max_loaded_loras': None, 'max_lora_rank': None, 'target_modules': None, 'backend': None, 'eviction_policy': None}))


class ScaleIn(ApiModel):
    "ScaleIn"

    replicas: int


class SecretIn(ApiModel):
    "SecretIn"

    name: str
    value: str
    description: str = ''


class SecretOut(ApiModel):
    "SecretOut"

    id: UUID
    name: str
    description: str
    created_at: datetime
    updated_at: datetime


class SecretPage(ApiModel):
    "SecretPage"

    items: list[SecretOut]
    count: int
    next: str | None = None


class SettingsPatchIn(ApiModel):
    "SettingsPatchIn"

    spec: RuntimeSpec
    base_revision: int
    message: str = ''
    name: str | None = None
    labels: dict[str, str] | None = None


class SharedClaimCache(ApiModel):
    "A ReadWriteMany claim Plinth creates per endpoint (``<slug>-model-cache``), shared by its"

    type: Literal['rwx'] = 'rwx'
    storage_class: str | None = None
    size_gib: int = 500


class SideOut(ApiModel):
    "SideOut"

    requests: float
    errors: float
    error_rate: float
    ttft_p90: float | None
    itl_p90: float | None
    prompt_tokens: float
    completion_tokens: float


class SloIn(ApiModel):
    "SloIn"

    ttft_p90_s: float = 1.0
    itl_p90_s: float | None = None
    e2e_p90_s: float | None = None
    tpot_mean_s: float | None = None


class SloTargets(ApiModel):
    "Latency targets the SLO autoscaling policy sizes replicas for (p90, milliseconds)."

    ttft_p90_ms: float | None = None
    itl_p90_ms: float | None = None


class SpeculatorSettings(ApiModel):
    "SpeculatorSettings"

    algorithm: Literal['none', 'EAGLE', 'EAGLE3', 'MTP', 'NGRAM', 'STANDALONE'] = 'none'
    draft_model: str | None = None
    draft_model_revision: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    ngram: NgramSettings = Field(default_factory=lambda: NgramSettings.model_validate({'min_bfs_breadth': None, 'max_bfs_breadth': None, 'match_type': None, 'max_trie_depth': None, 'capacity': None}))


class StorageTier(ApiModel):
    "HiCache's storage tier behind the host tier (`--hicache-storage-backend`)."

    backend: Literal['file', 'mooncake', 'hf3fs', 'nixl', 'aibrix', 'eic', 'simm', 'mori', 'shm', 'seaweedfs']
    prefetch_policy: Literal['best_effort', 'wait_complete', 'timeout'] | None = None
    node_path: str | None = None
    claim: str | None = None
    master_address: str | None = None
    metadata_server: str | None = None
    protocol: Literal['rdma', 'tcp'] | None = None
    device_name: str | None = None
    bandwidth_gbs: float | None = None


class ThresholdsIn(ApiModel):
    "ThresholdsIn"

    max_error_rate_delta: float | int = 0.05
    max_ttft_p90_ratio: float | int = 1.5
    max_itl_p90_ratio: float | int = 1.5
    window_s: int = 300
    min_requests: int = 20


class ThresholdsOut(ApiModel):
    "ThresholdsOut"

    max_error_rate_delta: float
    max_ttft_p90_ratio: float
    max_itl_p90_ratio: float
    window_s: int
    min_requests: int


class Toleration(ApiModel):
    "A Kubernetes toleration (``operator`` Exists takes no ``value``)."

    key: str | None = None
    operator: Literal['Exists', 'Equal'] = 'Equal'
    value: str | None = None
    effect: Literal['NoSchedule', 'PreferNoSchedule', 'NoExecute'] | None = None
    toleration_seconds: int | None = None


class TrafficIn(ApiModel):
    "TrafficIn"

    input_tokens: int = 1024
    output_tokens: int = 256
    rate_rps: float | None = None
    concurrency: int | None = None
    prefix_share: float = 0.0
    turns: int = 1
    working_set_tokens: int = 0


class TrafficOut(ApiModel):
    "TrafficOut"

    canary: SideOut
    baseline: SideOut


class UsageOut(ApiModel):
    "UsageOut"

    start: datetime
    end: datetime
    rows: list[UsageRowOut]


class UsageRowOut(ApiModel):
    "UsageRowOut"

    deployment_id: UUID
    deployment_slug: str
    api_key_id: UUID
    api_key_name: str
    api_key_prefix: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    purpose: str


class ValidateIn(ApiModel):
    "ValidateIn"

    spec: dict[str, Any]
    cluster_id: str | None = None
    deployment: str | None = None


class ValidateOut(ApiModel):
    "ValidateOut"

    valid: bool
    issues: list[IssueOut]
    estimate: Estimate | None
    target_revision: int | None = None
    changes: list[FieldChangeOut] | None = None


class WaterfallOut(ApiModel):
    "WaterfallOut"

    step: str
    candidate: CandidateOut | None


AbortIn.model_rebuild()
AccuracyOut.model_rebuild()
AccuracyQuery.model_rebuild()
AdapterIn.model_rebuild()
AdapterOut.model_rebuild()
AdapterTrafficOut.model_rebuild()
AdaptersOut.model_rebuild()
AiperfFromIndex.model_rebuild()
AiperfImage.model_rebuild()
ApiKeyCreatedOut.model_rebuild()
ApiKeyIn.model_rebuild()
ApiKeyLimitsIn.model_rebuild()
ApiKeyOut.model_rebuild()
ApiKeyPage.model_rebuild()
Architecture.model_rebuild()
ArtifactOut.model_rebuild()
ArtifactPage.model_rebuild()
AuditEventOut.model_rebuild()
AuditPage.model_rebuild()
AuditQuery.model_rebuild()
AutoscalingSettings.model_rebuild()
BatchingSettings.model_rebuild()
BenchmarkIn.model_rebuild()
BenchmarkOut.model_rebuild()
CalibrationSetIn.model_rebuild()
CalibrationSetOut.model_rebuild()
CalibrationSetPage.model_rebuild()
CanaryOut.model_rebuild()
CanaryStartIn.model_rebuild()
CandidateOut.model_rebuild()
ClaimCache.model_rebuild()
ClusterIn.model_rebuild()
ClusterOut.model_rebuild()
ClusterPage.model_rebuild()
ClusterPatch.model_rebuild()
ClusterRef.model_rebuild()
ClusterSettings.model_rebuild()
CompareOut.model_rebuild()
CompareQuery.model_rebuild()
ComparedPointOut.model_rebuild()
CorrectionOut.model_rebuild()
CostQuery.model_rebuild()
CostRowOut.model_rebuild()
CostsOut.model_rebuild()
DeltaOut.model_rebuild()
DeploymentCreateIn.model_rebuild()
DeploymentDetailOut.model_rebuild()
DeploymentFilters.model_rebuild()
DeploymentOut.model_rebuild()
DeploymentPage.model_rebuild()
DiffOut.model_rebuild()
DiffQuery.model_rebuild()
DisaggregationSettings.model_rebuild()
DrainOut.model_rebuild()
ErrorDetailOut.model_rebuild()
ErrorOut.model_rebuild()
Estimate.model_rebuild()
EventOut.model_rebuild()
EventPage.model_rebuild()
EventQuery.model_rebuild()
FieldChangeOut.model_rebuild()
FieldErrorOut.model_rebuild()
GateIn.model_rebuild()
GateOut.model_rebuild()
GatePage.model_rebuild()
GpuNodeOut.model_rebuild()
GpuSelector.model_rebuild()
GpuTotalsOut.model_rebuild()
GpuType.model_rebuild()
GroupEstimate.model_rebuild()
HardwareSettings.model_rebuild()
HostPathCache.model_rebuild()
HostTier.model_rebuild()
InventoryOut.model_rebuild()
InvitationOut.model_rebuild()
InvitationPage.model_rebuild()
IssueOut.model_rebuild()
KvCacheSettings.model_rebuild()
KvTiers.model_rebuild()
LatencyOut.model_rebuild()
LimitsIn.model_rebuild()
LogLineOut.model_rebuild()
LogSourceOut.model_rebuild()
LogsOut.model_rebuild()
LogsQuery.model_rebuild()
LoraAdapter.model_rebuild()
LoraSettings.model_rebuild()
MeasuredOut.model_rebuild()
MemberIn.model_rebuild()
MemberOut.model_rebuild()
MemberPage.model_rebuild()
MetricOut.model_rebuild()
MetricsOut.model_rebuild()
ModelAccuracyOut.model_rebuild()
ModelArch.model_rebuild()
ModelSettings.model_rebuild()
NgramSettings.model_rebuild()
NoCache.model_rebuild()
OptimizeIn.model_rebuild()
OptimizeOut.model_rebuild()
OverrideIn.model_rebuild()
PageQuery.model_rebuild()
ParallelismSettings.model_rebuild()
PhaseOut.model_rebuild()
PlacedOn.model_rebuild()
PlacementClusterIn.model_rebuild()
PlacementIn.model_rebuild()
PlacementOut.model_rebuild()
PointOut.model_rebuild()
PoolBounds.model_rebuild()
PoolOut.model_rebuild()
PoolSettings.model_rebuild()
PredictedOut.model_rebuild()
PredictionOut.model_rebuild()
ProfileIn.model_rebuild()
ProfileOut.model_rebuild()
PromoteIn.model_rebuild()
QuantizationCandidateOut.model_rebuild()
QuantizationCompareOut.model_rebuild()
QuantizationDeployIn.model_rebuild()
QuantizationDeployOut.model_rebuild()
QuantizationRecipeIn.model_rebuild()
QuantizationRunIn.model_rebuild()
QuantizationRunOut.model_rebuild()
QuantizationRunPage.model_rebuild()
QuantizationSettings.model_rebuild()
QuotaIn.model_rebuild()
QuotaLineOut.model_rebuild()
QuotaUsageOut.model_rebuild()
RangeQuery.model_rebuild()
ReplicaStartOut.model_rebuild()
ReplicaStartPage.model_rebuild()
RevisionOut.model_rebuild()
RevisionPage.model_rebuild()
RevisionSummaryOut.model_rebuild()
RoleIn.model_rebuild()
RollbackIn.model_rebuild()
RoutingSettings.model_rebuild()
RuntimeSettings.model_rebuild()
RuntimeSpec.model_rebuild()
ScaleIn.model_rebuild()
SecretIn.model_rebuild()
SecretOut.model_rebuild()
SecretPage.model_rebuild()
SettingsPatchIn.model_rebuild()
SharedClaimCache.model_rebuild()
SideOut.model_rebuild()
SloIn.model_rebuild()
SloTargets.model_rebuild()
SpeculatorSettings.model_rebuild()
StorageTier.model_rebuild()
ThresholdsIn.model_rebuild()
ThresholdsOut.model_rebuild()
Toleration.model_rebuild()
TrafficIn.model_rebuild()
TrafficOut.model_rebuild()
UsageOut.model_rebuild()
UsageRowOut.model_rebuild()
ValidateIn.model_rebuild()
ValidateOut.model_rebuild()
WaterfallOut.model_rebuild()
