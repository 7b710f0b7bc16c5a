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

from django.http import QueryDict
from pydantic import BaseModel

from runtime.catalog import list_gpus, list_models
from runtime.issues import Issue, error
from runtime.spec import KV_CACHE_DTYPES, PLINTH_ROUTING, QUANTIZATION_METHODS, RuntimeSpec

CUSTOM_ARCH_TOGGLE = "model.custom_architecture"


@dataclass(frozen=True)
class FormField:
    """One input of the settings form, named by its RuntimeSpec path."""

    path: str
    label: str
    help: str = ""
    choices: tuple[str, ...] = ()
    placeholder: str = ""

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


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    fields: tuple[FormField, ...]
    advanced: bool = False


def _gpu_choices() -> tuple[str, ...]:
    return tuple(gpu.id for gpu in list_gpus())


SECTIONS: tuple[Section, ...] = (
    Section(
        "model",
        "Model",
        (
            FormField(
                "model.source",
                "Model",
                "catalogue id or Hugging Face repo",
                placeholder="meta-llama/Llama-3.1-8B-Instruct",
            ),
            FormField("model.served_name", "Served model name", "defaults to the model id"),
            FormField("model.context_length", "Context length", "tokens; default: the model's"),
            FormField(
                "model.hf_token_secret",
                "Hugging Face token secret",
                "a secret's name, for gated weights",
            ),
            FormField("model.trust_remote_code", "Trust remote code"),
        ),
    ),
    Section(
        "architecture",
        "Custom architecture",
        (
            FormField("model.architecture.num_layers", "Layers"),
            FormField("model.architecture.hidden_size", "Hidden size"),
            FormField("model.architecture.num_attention_heads", "Attention heads"),
            FormField("model.architecture.num_kv_heads", "KV heads"),
            FormField("model.architecture.head_dim", "Head dim"),
            FormField("model.architecture.vocab_size", "Vocabulary size"),
            FormField("model.architecture.params_b", "Parameters (billions)"),
            FormField("model.architecture.max_context", "Max context"),
        ),
        advanced=True,
    ),
    Section(
        "hardware",
        "Hardware",
        (
            # The catalogue's GPUs (data, not code): a new GPU needs no change here.
            FormField("hardware.gpu", "GPU type", choices=_gpu_choices()),
            FormField("hardware.gpus_per_replica", "GPUs per replica", "default: tp x pp"),
            FormField(
                "hardware.price_per_gpu_hour", "Price per GPU-hour (USD)", "overrides the catalogue"
            ),
        ),
    ),
    Section(
        "parallelism",
        "Parallelism",
        (
            FormField("parallelism.tp", "Tensor parallel (tp)"),
            FormField("parallelism.pp", "Pipeline parallel (pp)"),
            FormField("parallelism.attn_dp", "Attention data parallel"),
            FormField("parallelism.ep", "Expert parallel (ep)"),
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
            ),
            FormField("disaggregation.prefill.replicas", "Prefill replicas"),
            FormField("disaggregation.prefill.tp", "Prefill tp", "default: parallelism tp"),
            FormField("disaggregation.decode.replicas", "Decode replicas"),
            FormField("disaggregation.decode.tp", "Decode tp", "default: parallelism tp"),
            FormField("disaggregation.transfer_backend", "KV transfer backend"),
            FormField("disaggregation.bootstrap_port", "Bootstrap port"),
            FormField("disaggregation.ib_device", "InfiniBand device(s)", "e.g. mlx5_0,mlx5_1"),
            FormField("disaggregation.decode_radix_cache", "Radix cache on decode"),
        ),
        advanced=True,
    ),
    Section(
        "batching",
        "Batching",
        (
            FormField(
                "batching.max_running_requests", "Max running requests", "default: sized by SGLang"
            ),
            FormField("batching.max_prefill_tokens", "Max prefill tokens"),
            FormField("batching.chunked_prefill_size", "Chunked prefill size", "-1 disables"),
            FormField("batching.schedule_policy", "Schedule policy"),
            FormField(
                "batching.mem_fraction_static",
                "Static memory fraction",
                "0 to 1: weights + KV cache",
            ),
            FormField("batching.cuda_graph_max_bs_decode", "CUDA graph max batch (decode)"),
            FormField("batching.stream_interval", "Stream interval"),
            FormField("batching.radix_cache", "Radix (prefix) cache"),
            FormField("batching.mixed_chunk", "Mixed chunk"),
        ),
    ),
    Section(
        "quantization",
        "Quantization",
        (
            FormField("quantization.method", "Weights", choices=QUANTIZATION_METHODS),
            FormField("quantization.kv_cache_dtype", "KV-cache dtype", choices=KV_CACHE_DTYPES),
        ),
    ),
    Section(
        "speculator",
        "Speculative decoding",
        (
            FormField("speculator.algorithm", "Algorithm"),
            FormField("speculator.draft_model", "Draft model"),
            FormField("speculator.num_steps", "Steps"),
            FormField("speculator.eagle_topk", "EAGLE top-k"),
            FormField("speculator.num_draft_tokens", "Draft tokens"),
        ),
    ),
    Section(
        "routing",
        "Routing",
        (
            FormField("routing.policy", "Policy"),
            # Empty numbers take Plinth's measured defaults (runtime.spec.PLINTH_ROUTING), shown.
            FormField(
                "routing.cache_threshold",
                "Cache threshold",
                f"0 to 1; default {PLINTH_ROUTING.cache_threshold}",
            ),
            FormField(
                "routing.balance_abs_threshold",
                "Balance threshold (load gap)",
                f"default {PLINTH_ROUTING.balance_abs_threshold}",
            ),
            FormField(
                "routing.balance_rel_threshold",
                "Balance threshold (load ratio)",
                f"default {PLINTH_ROUTING.balance_rel_threshold}",
            ),
            FormField("routing.overload_protection", "Overload protection (moves requests off)"),
            FormField(
                "routing.warmup_seconds",
                "Warm-up diversion to new replicas (s)",
                f"default {PLINTH_ROUTING.warmup_seconds}",
            ),
        ),
    ),
    Section(
        "autoscaling",
        "Autoscaling",
        (
            FormField("autoscaling.min_replicas", "Min replicas"),
            FormField("autoscaling.max_replicas", "Max replicas"),
            FormField(
                "autoscaling.concurrency_target",
                "Concurrency target",
                "in-flight requests per replica",
            ),
            FormField("autoscaling.scale_down_delay_seconds", "Scale-down delay (s)"),
            FormField("autoscaling.scale_to_zero", "Scale to zero when idle"),
            FormField("autoscaling.scale_to_zero_after_seconds", "Idle time before zero (s)"),
        ),
    ),
)

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

    @property
    def shown(self) -> str:
        """The value as an input shows it (None -> empty)."""
        return "" if self.value is None else str(self.value)

    @property
    def has_error(self) -> bool:
        return any(issue.is_error for issue in self.issues)


@dataclass(frozen=True)
class BoundSection:
    section: Section
    fields: list[BoundField]


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
    return [
        BoundSection(
            section,
            [BoundField(f, values.get(f.path), grouped.get(f.path, [])) for f in section.fields],
        )
        for section in SECTIONS
    ]


def posted_values(post: QueryDict, parsed: ParsedForm) -> dict[str, Any]:
    """What the person typed, as typed (so a bad number stays in its input to be fixed)."""
    values = flatten(parsed.data)
    for field_ in ALL_FIELDS:
        raw = _last(post, field_.path)
        if raw is not None and field_.kind != "checkbox":
            values[field_.path] = raw
    values[CUSTOM_ARCH_TOGGLE] = _custom_posted(post)
    return values
