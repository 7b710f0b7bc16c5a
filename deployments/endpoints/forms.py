"""The console's endpoint settings form: flat HTML fields <-> a nested RuntimeSpec dict.

Each input is named by its RuntimeSpec field path (``parallelism.tp``), so server-side issues
(which name the same paths) land next to the right input. Values are coerced by the type the
spec declares for that path, because RuntimeSpec parses strictly (no "4" for 4). Rendering and
validation metadata live here; checking the settings is ``runtime.validate``'s job.
"""

from __future__ import annotations

import copy
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from django.http import QueryDict
from pydantic import BaseModel

from runtime.catalog import get_model, list_gpus, list_models
from runtime.issues import Issue, error, field_words
from runtime.rules.parallel import kv_heads_divide
from runtime.spec import KV_CACHE_DTYPES, PLINTH_ROUTING, QUANTIZATION_METHODS, RuntimeSpec

CUSTOM_ARCH_TOGGLE = "model.custom_architecture"


# SGLang's documentation of the flags a field sets: each link opens the page at the flag's name
# (a text fragment: the pages have anchors per section, not per flag).
ENGINE_DOCS = "https://docs.sglang.io/advanced_features/server_arguments.html"
ROUTER_DOCS = "https://docs.sglang.io/advanced_features/sgl_model_gateway.html"

# SGLang's --quantization names, with the names people know them by.
QUANTIZATION_NAMES: dict[str, str] = {
    "fp8": "FP8, quantized on load",
    "mxfp8": "MXFP8",
    "modelopt": "ModelOpt checkpoint (FP8 or NVFP4, detected)",
    "modelopt_fp8": "FP8 checkpoint (ModelOpt)",
    "modelopt_fp4": "NVFP4 checkpoint (ModelOpt)",
    "modelopt_mixed": "ModelOpt mixed precision",
    "nvfp4_online": "NVFP4, converted on load (MoE)",
    "w8a8_fp8": "FP8 weights and activations (W8A8)",
    "w8a8_int8": "INT8 weights and activations (W8A8)",
    "awq": "AWQ (INT4)",
    "awq_marlin": "AWQ (INT4), Marlin kernels",
    "gptq": "GPTQ (INT4)",
    "gptq_marlin": "GPTQ (INT4), Marlin kernels",
    "bitsandbytes": "bitsandbytes (4- or 8-bit)",
    "gguf": "GGUF",
    "moe_wna16": "INT4/INT8 MoE weights (WNA16)",
    "w4afp8": "INT4 weights, FP8 activations",
    "mxfp4": "MXFP4",
    "compressed-tensors": "compressed-tensors (LLM Compressor)",
    "auto-round": "AutoRound",
    "petit_nvfp4": "NVFP4 (Petit kernels)",
}
KV_CACHE_NAMES: dict[str, str] = {
    "auto": "as the model (BF16)",
    "bf16": "BF16",
    "fp8_e4m3": "FP8 (E4M3)",
    "fp8_e5m2": "FP8 (E5M2)",
    "mxfp8": "MXFP8",
    "nvfp4": "NVFP4",
}
# Tensor-parallel widths offered for a model of unknown heads.
TP_WIDTHS = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class FormField:
    """One input of the settings form, named by its RuntimeSpec path.

    ``flag`` is the SGLang (or router) flag the field sets, for the help link; ``names`` gives
    choices their everyday names, shown beside SGLang's value.
    """

    path: str
    label: str
    help: str = ""
    choices: tuple[str, ...] = ()
    placeholder: str = ""
    flag: str = ""
    router: bool = False
    names: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def dom_id(self) -> str:
        return "f-" + self.path.replace(".", "-").replace("_", "-")

    @property
    def kind(self) -> str:
        """``checkbox``, ``select``, ``number`` or ``text`` (from the spec's declared type)."""
        base = _base_type(spec_annotation(self.path))
        if base is bool:
            return "checkbox"
        if self.choices or typing.get_origin(base) is Literal:
            return "select"
        return "number" if base in (int, float) else "text"

    @property
    def options(self) -> tuple[str, ...]:
        if self.choices:
            return self.choices
        base = _base_type(spec_annotation(self.path))
        return tuple(str(v) for v in typing.get_args(base))

    @property
    def optional(self) -> bool:
        return _is_optional(spec_annotation(self.path))

    @property
    def docs_url(self) -> str:
        """SGLang's documentation of the flag, opened at its name; "" for a Plinth setting."""
        if not self.flag:
            return ""
        page = ROUTER_DOCS if self.router else ENGINE_DOCS
        # "-" is a text fragment's own syntax: a flag's dashes are escaped.
        return f"{page}#:~:text={quote(self.flag, safe='').replace('-', '%2D')}"


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    fields: tuple[FormField, ...]
    advanced: bool = False


def _gpu_choices() -> tuple[str, ...]:
    return tuple(gpu.id for gpu in list_gpus())


SECTIONS: tuple[Section, ...] = (
    # The first step, always open: what to serve, on what, how many. Every other section is
    # collapsed behind a one-line summary of its values.
    Section(
        "basics",
        "Basics",
        (
            FormField(
                "model.source",
                "Model",
                "a catalogue model or a Hugging Face repo",
                placeholder="meta-llama/Llama-3.1-8B-Instruct",
                flag="--model-path",
            ),
            # The catalogue's GPUs (data, not code): a new GPU needs no change here.
            FormField(
                "hardware.gpu", "GPU type", "prices and memory from the catalogue", _gpu_choices()
            ),
            FormField(
                "autoscaling.min_replicas",
                "Min replicas",
                "copies kept running; 0 with scale to zero",
            ),
            FormField("autoscaling.max_replicas", "Max replicas", "the most copies under load"),
        ),
    ),
    Section(
        "model",
        "Model options",
        (
            FormField(
                "model.served_name",
                "Served model name",
                "the name clients send; default: the model id",
                flag="--served-model-name",
            ),
            FormField(
                "model.context_length",
                "Context length",
                "tokens per request, prompt and answer; default: the model's",
                flag="--context-length",
            ),
            FormField(
                "model.hf_token_secret",
                "Hugging Face token secret",
                "a secret's name, for gated weights",
            ),
            FormField(
                "model.trust_remote_code",
                "Trust remote code",
                "run the model repository's own Python code",
                flag="--trust-remote-code",
            ),
        ),
    ),
    Section(
        "architecture",
        "Custom architecture",
        (
            FormField("model.architecture.num_layers", "Layers", "num_hidden_layers"),
            FormField("model.architecture.hidden_size", "Hidden size", "hidden_size"),
            FormField(
                "model.architecture.num_attention_heads", "Attention heads", "num_attention_heads"
            ),
            FormField("model.architecture.num_kv_heads", "KV heads", "num_key_value_heads"),
            FormField("model.architecture.head_dim", "Head dim", "head_dim"),
            FormField("model.architecture.vocab_size", "Vocabulary size", "vocab_size"),
            FormField(
                "model.architecture.params_b", "Parameters (billions)", "from the model card"
            ),
            FormField("model.architecture.max_context", "Max context", "max_position_embeddings"),
        ),
        advanced=True,
    ),
    Section(
        "hardware",
        "Hardware",
        (
            FormField("hardware.gpus_per_replica", "GPUs per replica", "default: TP x PP"),
            FormField(
                "hardware.price_per_gpu_hour",
                "Price per GPU-hour (USD)",
                "overrides the catalogue's price",
            ),
        ),
    ),
    Section(
        "parallelism",
        "Parallelism",
        (
            FormField(
                "parallelism.tp",
                "Tensor parallel (TP)",
                "GPUs one copy of the model is split over; only widths the model's heads divide",
                flag="--tp-size",
            ),
            FormField(
                "parallelism.pp",
                "Pipeline parallel (PP)",
                "layers split in stages",
                flag="--pp-size",
            ),
            FormField(
                "parallelism.attn_dp",
                "Attention data parallel",
                "for MLA/MoE models; divides TP",
                flag="--dp-size",
            ),
            FormField(
                "parallelism.ep", "Expert parallel (EP)", "MoE models only", flag="--ep-size"
            ),
        ),
    ),
    Section(
        "disaggregation",
        "Prefill/decode pools",
        (
            FormField(
                "disaggregation.enabled",
                "Split prefill and decode",
                "separate GPU pools; replicas are then fixed per pool, not autoscaled",
                flag="--disaggregation-mode",
            ),
            FormField("disaggregation.prefill.replicas", "Prefill replicas", "prefill engines"),
            FormField(
                "disaggregation.prefill.tp", "Prefill TP", "default: the TP above", flag="--tp-size"
            ),
            FormField("disaggregation.decode.replicas", "Decode replicas", "decode engines"),
            FormField(
                "disaggregation.decode.tp", "Decode TP", "default: the TP above", flag="--tp-size"
            ),
            FormField(
                "disaggregation.transfer_backend",
                "KV transfer backend",
                "how the KV cache moves between pools",
                flag="--disaggregation-transfer-backend",
            ),
            FormField(
                "disaggregation.bootstrap_port",
                "Bootstrap port",
                "where decode finds prefill",
                flag="--disaggregation-bootstrap-port",
            ),
            FormField(
                "disaggregation.ib_device",
                "InfiniBand device(s)",
                "e.g. mlx5_0,mlx5_1",
                flag="--disaggregation-ib-device",
            ),
            FormField(
                "disaggregation.decode_radix_cache",
                "Radix cache on decode",
                "reuse prefixes on the decode pool",
                flag="--disaggregation-decode-enable-radix-cache",
            ),
        ),
        advanced=True,
    ),
    Section(
        "batching",
        "Batching",
        (
            FormField(
                "batching.max_running_requests",
                "Max running requests",
                "requests decoded at once; default: sized by SGLang",
                flag="--max-running-requests",
            ),
            FormField(
                "batching.max_prefill_tokens",
                "Max prefill tokens",
                "prompt tokens per prefill batch",
                flag="--max-prefill-tokens",
            ),
            FormField(
                "batching.chunked_prefill_size",
                "Chunked prefill size",
                "long prompts are prefilled in chunks of this many tokens; -1 disables",
                flag="--chunked-prefill-size",
            ),
            FormField(
                "batching.schedule_policy",
                "Schedule policy",
                "which waiting request runs next",
                flag="--schedule-policy",
            ),
            FormField(
                "batching.mem_fraction_static",
                "Static memory fraction",
                "0 to 1: the share of GPU memory for weights + KV cache",
                flag="--mem-fraction-static",
            ),
            FormField(
                "batching.cuda_graph_max_bs_decode",
                "CUDA graph max batch (decode)",
                "largest decode batch captured as a CUDA graph",
                flag="--cuda-graph-max-bs",
            ),
            FormField(
                "batching.stream_interval",
                "Stream interval",
                "tokens per streamed chunk",
                flag="--stream-interval",
            ),
            FormField(
                "batching.radix_cache",
                "Radix (prefix) cache",
                "reuse the KV cache of shared prompt prefixes",
                flag="--disable-radix-cache",
            ),
            FormField(
                "batching.mixed_chunk",
                "Mixed chunk",
                "prefill and decode in one batch",
                flag="--enable-mixed-chunk",
            ),
        ),
    ),
    Section(
        "quantization",
        "Quantization",
        (
            FormField(
                "quantization.method",
                "Weights",
                "leave as shipped for a quantized checkpoint; FP8 quantizes a BF16 one on load",
                QUANTIZATION_METHODS,
                flag="--quantization",
                names=QUANTIZATION_NAMES,
            ),
            FormField(
                "quantization.kv_cache_dtype",
                "KV cache",
                "FP8 holds about twice the tokens",
                KV_CACHE_DTYPES,
                flag="--kv-cache-dtype",
                names=KV_CACHE_NAMES,
            ),
        ),
    ),
    Section(
        "speculator",
        "Speculative decoding",
        (
            FormField(
                "speculator.algorithm",
                "Algorithm",
                "a draft proposes tokens the model checks in one step",
                flag="--speculative-algorithm",
            ),
            FormField(
                "speculator.draft_model",
                "Draft model",
                "an EAGLE head or small model trained for this one",
                flag="--speculative-draft-model-path",
            ),
            FormField(
                "speculator.num_steps",
                "Steps",
                "draft steps per check",
                flag="--speculative-num-steps",
            ),
            FormField(
                "speculator.eagle_topk",
                "EAGLE top-k",
                "branches per draft step",
                flag="--speculative-eagle-topk",
            ),
            FormField(
                "speculator.num_draft_tokens",
                "Draft tokens",
                "tokens checked per step",
                flag="--speculative-num-draft-tokens",
            ),
        ),
    ),
    Section(
        "routing",
        "Routing",
        (
            FormField(
                "routing.policy",
                "Policy",
                "how the router picks a replica",
                flag="--policy",
                router=True,
            ),
            FormField(
                "routing.placement",
                "Placement of a new prompt prefix",
                "cache_aware only. Default by count: the gateway gives each new prefix the replica"
                " holding the fewest; first fit: smg's cache tree places it, with the knobs below",
                names={"by_count": "by count", "first_fit": "first fit (smg's tree)"},
            ),
            # Empty numbers take Plinth's measured defaults (runtime.spec.PLINTH_ROUTING), shown.
            FormField(
                "routing.cache_threshold",
                "Cache threshold",
                "0 to 1: the share of a prompt a replica must hold to keep getting it",
                placeholder=f"default {PLINTH_ROUTING.cache_threshold}",
                flag="--cache-threshold",
                router=True,
            ),
            FormField(
                "routing.balance_abs_threshold",
                "Balance threshold (load gap)",
                "balance by load instead of cache past this gap in running requests",
                placeholder=f"default {PLINTH_ROUTING.balance_abs_threshold}",
                flag="--balance-abs-threshold",
                router=True,
            ),
            FormField(
                "routing.balance_rel_threshold",
                "Balance threshold (load ratio)",
                "...and past this ratio of the busiest replica's load to the idlest's",
                placeholder=f"default {PLINTH_ROUTING.balance_rel_threshold}",
                flag="--balance-rel-threshold",
                router=True,
            ),
            FormField(
                "routing.overload_protection",
                "Overload protection (moves requests off)",
                "move requests off a busy replica",
                flag="--worker-overload-protection",
                router=True,
            ),
            FormField(
                "routing.warmup_seconds",
                "Warm-up diversion to new replicas (s)",
                "new replicas get fewer requests for this long",
                placeholder=f"default {PLINTH_ROUTING.warmup_seconds}",
                flag="--worker-warmup-secs",
                router=True,
            ),
        ),
    ),
    Section(
        "autoscaling",
        "Autoscaling",
        (
            FormField(
                "autoscaling.concurrency_target",
                "Concurrency target",
                "in-flight requests per replica",
            ),
            FormField(
                "autoscaling.scale_down_delay_seconds",
                "Scale-down delay (s)",
                "quiet time before a replica is removed",
            ),
            FormField(
                "autoscaling.scale_to_zero", "Scale to zero when idle", "no GPUs while unused"
            ),
            FormField(
                "autoscaling.scale_to_zero_after_seconds",
                "Idle time before zero (s)",
                "how long idle before the last replica stops",
            ),
            FormField(
                "autoscaling.slo.ttft_p90_ms",
                "SLO: TTFT p90 (ms)",
                "set a target to scale on latency instead of the concurrency target",
            ),
            FormField(
                "autoscaling.slo.itl_p90_ms", "SLO: ITL p90 (ms)", "time between streamed tokens"
            ),
        ),
    ),
)
# Optional groups the form shows only some fields of: left with no value set, the group is
# dropped (an empty ``autoscaling.slo`` would be an SLO policy without a target).
OPTIONAL_GROUPS = ("autoscaling.slo",)

ALL_FIELDS: tuple[FormField, ...] = tuple(f for s in SECTIONS for f in s.fields)
ARCH_PREFIX = "model.architecture."

DEFAULT_SPEC: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
}


def model_choices() -> list[str]:
    """Ids and repos offered in the model search (a datalist), targets before draft heads."""
    models = sorted(list_models(), key=lambda m: m.draft_algorithm is not None)
    return [m.hf_repo or m.id for m in models]


# --- types -----------------------------------------------------------------------------------


def spec_annotation(path: str) -> Any:
    """The annotation RuntimeSpec declares for a dotted field path."""
    model: type[BaseModel] = RuntimeSpec
    annotation: Any = None
    for part in path.split("."):
        annotation = model.model_fields[part].annotation
        nested = [
            t for t in _union_args(annotation) if isinstance(t, type) and issubclass(t, BaseModel)
        ]
        if nested:
            model = nested[0]
    return annotation


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _is_optional(annotation: Any) -> bool:
    return type(None) in _union_args(annotation)


def _base_type(annotation: Any) -> Any:
    args = [a for a in _union_args(annotation) if a is not type(None)]
    base = args[0] if args else annotation
    # Annotated[int, Field(...)] -> int
    if typing.get_origin(base) is typing.Annotated:
        base = typing.get_args(base)[0]
    return base


# --- parsing ---------------------------------------------------------------------------------


@dataclass
class ParsedForm:
    data: dict[str, Any]
    issues: list[Issue] = field(default_factory=list)


def _coerce(field_: FormField, raw: str) -> Any:
    base = _base_type(spec_annotation(field_.path))
    if base is bool:
        return raw in ("true", "on", "1")
    if base is int:
        return int(raw)
    if base is float:
        number = float(raw)
        if not math.isfinite(number):
            # JSON (and so a stored revision) has no NaN or infinity.
            raise ValueError(raw)
        return number
    return raw


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def _drop_path(data: dict[str, Any], path: str) -> None:
    *parents, leaf = path.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(leaf, None)


def _last(post: QueryDict, name: str) -> str | None:
    # Checkboxes post a hidden "false" then, when ticked, "true": the last value wins.
    values = post.getlist(name)
    return values[-1].strip() if values else None


def parse_spec(post: QueryDict, base: dict[str, Any] | None = None) -> ParsedForm:
    """The nested spec dict a form posts, laid over ``base`` (an edit keeps unshown fields).

    Values that are not numbers where the spec wants numbers become field issues here, so
    the person sees "parallelism.tp: enter a whole number" rather than a type error.
    """
    data = copy.deepcopy(base or {})
    parsed = ParsedForm(data=data)
    custom = _custom_posted(post)
    if not custom:
        _drop_path(data, "model.architecture")
    elif not isinstance(data.get("model", {}).get("architecture"), dict):
        # Ticked but left empty: an empty description, so each missing number is reported.
        _set_path(data, "model.architecture", {})
    for field_ in ALL_FIELDS:
        if field_.path.startswith(ARCH_PREFIX) and not custom:
            continue
        raw = _last(post, field_.path)
        if raw is None:
            continue
        if raw == "":
            if field_.optional:
                _set_path(data, field_.path, None)
            else:
                _drop_path(data, field_.path)
            continue
        try:
            _set_path(data, field_.path, _coerce(field_, raw))
        except ValueError:
            kind = (
                "a whole number" if _base_type(spec_annotation(field_.path)) is int else "a number"
            )
            parsed.issues.append(
                error(
                    field_.path,
                    "invalid_type",
                    f"{field_.label}: enter {kind}",
                    f"e.g. {_example(field_)}",
                )
            )
    for group in OPTIONAL_GROUPS:
        parent, _, name = group.rpartition(".")
        node = data.get(parent)
        group_values = node.get(name) if isinstance(node, dict) else None
        if isinstance(group_values, dict) and all(v is None for v in group_values.values()):
            node[name] = None  # type: ignore[index]
    return parsed


def _custom_posted(post: QueryDict) -> bool:
    return _last(post, CUSTOM_ARCH_TOGGLE) in ("true", "on")


def uses_custom_architecture(values: dict[str, Any]) -> bool:
    """Whether the form describes its own architecture: the toggle says so, never the inputs.

    The architecture inputs are always in the page (hidden while unticked), so they are always
    posted, empty or not; reading their presence as "custom" ticked the box on every refused
    save and then demanded all eight numbers.
    """
    return values.get(CUSTOM_ARCH_TOGGLE) is True


def _example(field_: FormField) -> str:
    return "1" if _base_type(spec_annotation(field_.path)) is int else "0.5"


def flatten(spec: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"parallelism": {"tp": 2}}`` -> ``{"parallelism.tp": 2}`` (the form's initial values)."""
    flat: dict[str, Any] = {}
    for key, value in spec.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path != "runtime.extra_flags" and path != "runtime.env":
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def issues_by_field(issues: list[Issue]) -> dict[str, list[Issue]]:
    """Issues keyed by the form field they belong to; others under ``""`` (shown on top)."""
    known = {f.path for f in ALL_FIELDS}
    grouped: dict[str, list[Issue]] = {}
    for issue in issues:
        key = issue.field.removeprefix("spec.")
        grouped.setdefault(key if key in known else "", []).append(issue)
    return grouped


# --- rendering -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BoundField:
    field: FormField
    value: Any
    issues: list[Issue]
    # (value, text) of each choice, where they depend on other values (TP on the model's heads).
    bound_options: tuple[tuple[str, str], ...] = ()

    @property
    def shown(self) -> str:
        """The value as an input shows it (None -> empty)."""
        return "" if self.value is None else str(self.value)

    @property
    def has_error(self) -> bool:
        return any(issue.is_error for issue in self.issues)

    @property
    def kind(self) -> str:
        return "select" if self.bound_options else self.field.kind

    @property
    def choices(self) -> tuple[tuple[str, str], ...]:
        """(value, text) of each option: SGLang's value, with the everyday name beside it."""
        if self.bound_options:
            return self.bound_options
        names = self.field.names
        return tuple(
            (opt, f"{names[opt]} ({opt})" if opt in names else opt) for opt in self.field.options
        )


@dataclass(frozen=True)
class BoundSection:
    section: Section
    fields: list[BoundField]

    @property
    def has_error(self) -> bool:
        return any(bf.has_error for bf in self.fields)

    @property
    def summary(self) -> str:
        """One line of the section's current values, for its collapsed heading."""
        first = self.fields[0] if self.fields else None
        if first is not None and first.field.path.endswith(".enabled") and first.value is not True:
            return "off"  # a switched-off feature: its other values do nothing
        parts = []
        for bf in self.fields:
            if bf.field.kind == "checkbox":
                parts.append(f"{bf.field.label}: {'on' if bf.value is True else 'off'}")
            elif bf.value in (None, "") and bf.field.path == "quantization.method":
                parts.append("Weights as shipped")
            elif bf.value not in (None, "", "none"):
                parts.append(f"{bf.field.label} {bf.field.names.get(bf.shown, bf.shown)}")
        return " · ".join(parts) or "defaults"


@dataclass(frozen=True)
class ShownIssue:
    """An issue as the form shows it away from its input: led by the field's label, not path."""

    issue: Issue

    def __getattr__(self, name: str) -> Any:
        return getattr(self.issue, name)

    @property
    def label(self) -> str:
        return field_label(self.issue.field)


def field_label(path: str) -> str:
    """The form's label for a spec path ("spec." or not); the plain words for one not shown."""
    key = path.removeprefix("spec.")
    found = next((f.label for f in ALL_FIELDS if f.path == key), None)
    return found or field_words(key)


def _heads(values: dict[str, Any]) -> tuple[int, int] | None:
    """(attention heads, KV heads) of the form's model: described, else the catalogue's."""
    if uses_custom_architecture(values):
        try:
            heads = int(values.get(ARCH_PREFIX + "num_attention_heads") or 0)
            kv = int(values.get(ARCH_PREFIX + "num_kv_heads") or heads)
        except (TypeError, ValueError):
            return None
        return (heads, kv) if heads > 0 and kv > 0 else None
    model = values.get("model.source")
    arch = get_model(model) if isinstance(model, str) and model else None
    return (arch.num_attention_heads, arch.num_kv_heads) if arch else None


def tp_key(values: dict[str, Any]) -> str:
    """What the TP choices depend on, as text: the page re-sends them when it changes."""
    heads = _heads(values)
    return f"{heads[0]}/{heads[1]}" if heads else "any"


def tp_choices(values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The TP widths up to 16 that the model's attention and KV heads divide (SGLang's rule).

    All widths that are powers of two for a model whose heads are unknown. The value set is kept
    among them even when it does not divide, so the select shows it and its error says why.
    """
    heads = _heads(values)
    if heads is None:
        widths = list(TP_WIDTHS)
    else:
        attention, kv = heads
        widths = [t for t in range(1, 17) if attention % t == 0 and kv_heads_divide(kv, t)]
    try:
        now: int | None = int(values.get("parallelism.tp"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        now = None
    if now is not None and now not in widths:
        widths = sorted({*widths, now})
    return tuple((str(t), f"{t} GPU{'s' if t != 1 else ''}") for t in widths)


def initial_values(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Flat values for the form: the spec's (or the defaults'), every default filled in."""
    source = spec or DEFAULT_SPEC
    try:
        full = RuntimeSpec.model_validate(source).model_dump(mode="json")
    except ValueError:
        full = source
    values = flatten(full)
    values[CUSTOM_ARCH_TOGGLE] = isinstance(full.get("model", {}).get("architecture"), dict)
    return values


def bind(values: dict[str, Any], issues: list[Issue]) -> list[BoundSection]:
    grouped = issues_by_field(issues)

    def bound(f: FormField) -> BoundField:
        value = values.get(f.path)
        options: tuple[tuple[str, str], ...] = ()
        if f.path == "parallelism.tp":
            options = tp_choices(values)
        return BoundField(f, value, grouped.get(f.path, []), options)

    return [BoundSection(section, [bound(f) for f in section.fields]) for section in SECTIONS]


def posted_values(post: QueryDict, parsed: ParsedForm) -> dict[str, Any]:
    """What the person typed, as typed (so a bad number stays in its input to be fixed)."""
    values = flatten(parsed.data)
    for field_ in ALL_FIELDS:
        raw = _last(post, field_.path)
        if raw is not None and field_.kind != "checkbox":
            values[field_.path] = raw
    values[CUSTOM_ARCH_TOGGLE] = _custom_posted(post)
    return values
