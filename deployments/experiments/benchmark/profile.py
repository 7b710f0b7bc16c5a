"""A benchmark's traffic profile, its load points, its results and how two benchmarks compare.

Pure rules, no I/O: the service validates a profile with ``parse_profile`` (a ``ProfileError``
names the field), the runner walks ``load_points``, each point's AIPerf export becomes a
``PointResult`` (``deployments.experiments.benchmark.aiperf``), and ``compare`` lines two
benchmarks' points up by load and gives the deltas. ``predict`` asks the optimizer's model
(``runtime.optimize``) what the same profile should measure on the revision's spec, so results sit
next to it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from runtime.optimize import Layout, OptimizeError, OptimizeRequest, Traffic, predict_load
from runtime.spec import RuntimeSpec

MAX_POINTS = 8
# A run's key is temporary (an hour at most): the sweep's load must fit well inside it.
MAX_TOTAL_S = 2400
LIMITS: dict[str, tuple[float, float]] = {
    "input_tokens": (1, 131072),
    "output_tokens": (1, 32768),
    "duration_s": (2, 3600),
    "shared_prefix": (0.0, 0.95),
    "turns": (1, 20),
    "concurrency": (1, 4096),
    "request_rate": (0.01, 100000.0),
}
# Figures a point reports, each with a unit; latencies in milliseconds as AIPerf gives them.
LATENCIES = ("ttft", "itl", "e2e")
PERCENTILES = ("p50", "p90", "p99")
RATES = ("output_tokens_per_s", "requests_per_s")


class ProfileError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class TrafficProfile:
    """What a benchmark sends: prompts of ``input_tokens`` (a ``shared_prefix`` share of them
    the same for every request), answers of ``output_tokens``, conversations of ``turns`` turns,
    at each concurrency of the sweep (or at one request rate), ``duration_s`` per load point."""

    input_tokens: int = 512
    output_tokens: int = 128
    concurrency: tuple[int, ...] = (1, 4)
    request_rate: float | None = None
    duration_s: int = 30
    shared_prefix: float = 0.0
    turns: int = 1

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["concurrency"] = list(self.concurrency)
        return out


@dataclass(frozen=True)
class LoadPoint:
    kind: str  # "concurrency" or "request_rate"
    value: float

    @property
    def label(self) -> str:
        return f"c={self.value:g}" if self.kind == "concurrency" else f"{self.value:g} req/s"


@dataclass
class PointResult:
    """One load point's measured figures (latencies in ms), as stored in ``Benchmark.results``.

    ``requests`` are the answers measured; ``empty_answers`` (no text at all) and ``errors`` are
    counted apart from them and from each other. The answer length asked for sits beside the
    measured mean and minimum, with ``off_length_answers`` that differed from it, and ``notes``
    says in words what a reader must know about them."""

    kind: str
    value: float
    requests: int = 0
    errors: int = 0
    duration_s: float = 0.0
    output_tokens_per_s: float = 0.0
    requests_per_s: float = 0.0
    input_tokens_mean: float = 0.0
    output_tokens_requested: int = 0
    output_tokens_mean: float = 0.0
    output_tokens_min: float = 0.0
    off_length_answers: int = 0
    empty_answers: int = 0
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    error_summary: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(data: dict[str, Any], name: str, *, whole: bool) -> float:
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ProfileError(name, f"{name} must be a number")
    if whole and value != int(value):
        raise ProfileError(name, f"{name} must be a whole number")
    low, high = LIMITS[name]
    if not (math.isfinite(value) and low <= value <= high):
        raise ProfileError(name, f"{name} must be between {low:g} and {high:g}")
    return value


def parse_profile(data: dict[str, Any]) -> TrafficProfile:
    """A profile from a request body (missing fields take defaults), or a ProfileError."""
    unknown = set(data) - set(TrafficProfile.__dataclass_fields__)
    if unknown:
        name = sorted(unknown)[0]
        raise ProfileError(name, f"unknown profile field {name}")
    base = TrafficProfile()
    values: dict[str, Any] = {}
    for name in ("input_tokens", "output_tokens", "duration_s", "turns"):
        if data.get(name) is not None:
            values[name] = int(_number(data, name, whole=True))
    if data.get("shared_prefix") is not None:
        values["shared_prefix"] = float(_number(data, "shared_prefix", whole=False))
    if data.get("request_rate") is not None:
        values["request_rate"] = float(_number(data, "request_rate", whole=False))
        values["concurrency"] = ()
    if data.get("concurrency") is not None:
        values["concurrency"] = _sweep(data["concurrency"], values.get("request_rate"))
    profile = TrafficProfile(**{**asdict(base), **values})
    if profile.request_rate is None and not profile.concurrency:
        raise ProfileError("concurrency", "give a concurrency sweep or a request rate")
    if profile.duration_s * len(load_points(profile)) > MAX_TOTAL_S:
        raise ProfileError(
            "duration_s", f"duration_s x load points must be at most {MAX_TOTAL_S} s"
        )
    return profile


def _sweep(raw: Any, rate: float | None) -> tuple[int, ...]:
    if rate is not None and raw:
        raise ProfileError("concurrency", "give a concurrency sweep or a request rate, not both")
    if not isinstance(raw, list) or not raw or len(raw) > MAX_POINTS:
        raise ProfileError("concurrency", f"concurrency must list 1 to {MAX_POINTS} values")
    points = [int(_number({"concurrency": c}, "concurrency", whole=True)) for c in raw]
    if len(set(points)) != len(points):
        raise ProfileError("concurrency", "concurrency values must differ")
    return tuple(sorted(points))


def profile_from_dict(data: dict[str, Any]) -> TrafficProfile:
    """A stored profile (already validated) back as a TrafficProfile."""
    return TrafficProfile(**{**data, "concurrency": tuple(data.get("concurrency") or ())})


def load_points(profile: TrafficProfile) -> list[LoadPoint]:
    if profile.request_rate is not None:
        return [LoadPoint("request_rate", profile.request_rate)]
    return [LoadPoint("concurrency", c) for c in profile.concurrency]


# ---- the optimizer's prediction for the same profile ------------------------------------------
def predict(spec: RuntimeSpec, profile: TrafficProfile, replicas: int) -> list[dict[str, Any]]:
    """The optimizer's TTFT/ITL/e2e p90 (ms) and throughput per load point, for ``spec`` on
    ``replicas`` replicas. Empty when the model cannot price the spec (a model it does not know,
    a disaggregated layout)."""
    out = []
    for point in load_points(profile):
        traffic = Traffic(
            input_tokens=profile.input_tokens,
            output_tokens=profile.output_tokens,
            rate_rps=point.value if point.kind == "request_rate" else None,
            concurrency=int(point.value) if point.kind == "concurrency" else None,
            prefix_share=profile.shared_prefix,
            turns=profile.turns,
        )
        request = OptimizeRequest(
            model=spec.model.source, traffic=traffic, gpus=(spec.hardware.gpu,)
        )
        layout = Layout(
            gpu=spec.hardware.gpu,
            tp=spec.parallelism.tp,
            quantization=spec.quantization.method,
            kv_dtype=spec.quantization.kv_cache_dtype,
            replicas=max(1, replicas),
        )
        try:
            prediction = predict_load(request, layout)
        except (OptimizeError, ValueError, KeyError):
            return []
        if prediction is None:
            return []
        e2e = prediction.e2e_p90_s
        # The model's step time jumps at some batch sizes, so the closed loop may have no exact
        # fixed point: the rate stops below the jump and the users' end-to-end time is then what
        # Little's law says it must be (users / rate), not the time just below the jump.
        if point.kind == "concurrency" and prediction.rate_rps * e2e < 0.95 * point.value:
            e2e = point.value / max(prediction.rate_rps, 1e-9)
        out.append(
            {
                "kind": point.kind,
                "value": point.value,
                "ttft_p90_ms": _ms(prediction.ttft_p90_s),
                "itl_p90_ms": _ms(prediction.itl_p90_s),
                "e2e_p90_ms": _ms(e2e),
                "requests_per_s": round(prediction.rate_rps, 4),
                "output_tokens_per_s": round(prediction.output_tokens_per_s, 2),
            }
        )
    return out


def _ms(seconds: float) -> float | None:
    return round(seconds * 1000, 3) if math.isfinite(seconds) else None


# ---- comparing two benchmarks -----------------------------------------------------------------
def _figures(point: dict[str, Any]) -> dict[str, float]:
    out = {name: float(point.get(name) or 0.0) for name in RATES}
    for metric in LATENCIES:
        for pct in PERCENTILES:
            value = point.get("latency_ms", {}).get(metric, {}).get(pct)
            if value is not None:
                out[f"{metric}_{pct}_ms"] = float(value)
    out["errors"] = float(point.get("errors") or 0)
    return out


def compare(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per load point both benchmarks ran: each figure of ``a`` and ``b``, ``b - a`` and the
    change in percent of ``a`` (None when ``a`` is 0)."""
    by_load = {(p["kind"], float(p["value"])): p for p in b}
    rows = []
    for point in a:
        other = by_load.get((point["kind"], float(point["value"])))
        if other is None:
            continue
        fa, fb = _figures(point), _figures(other)
        metrics = {}
        for name in fa.keys() & fb.keys():
            delta = fb[name] - fa[name]
            pct = round(delta / fa[name] * 100, 2) if fa[name] else None
            metrics[name] = {"a": fa[name], "b": fb[name], "delta": round(delta, 4), "pct": pct}
        rows.append({"kind": point["kind"], "value": point["value"], "metrics": metrics})
    return rows
