"""Sync and async clients of the Plinth API.

Every resource method is written once and returns what its client's ``_call`` returns: the
parsed model for :class:`Plinth`, an awaitable of it for :class:`AsyncPlinth`. What differs
between the two (sending, paging, waiting, following logs) lives in the two client classes.

Retries: GETs, and POSTs with an ``Idempotency-Key`` (the same key on every try, so the server
answers a repeated POST with the first answer instead of acting twice), are retried on network
failures, 429 and 502/503/504 with backoff (``Retry-After`` honoured). PATCH and DELETE are
retried only when the request never reached the server.

``client.optimize(...)`` asks the optimizer (a dry run: it creates nothing) for ranked
settings; ``fit_candidate`` fits a pick to an existing endpoint before it is saved as a revision.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

import httpx
from pydantic import BaseModel

from plinth import config, models
from plinth.errors import (
    ConnectionFailed,
    FieldError,
    PlinthError,
    ValidationFailed,
    error_from_response,
)

M = TypeVar("M", bound=BaseModel)

API = "/api/v1"
# A keyword left out of a partial change (``None`` there means "no limit", so it cannot).
UNCHANGED: Any = object()
RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0
DEFAULT_PAGE = 100


@dataclass(frozen=True)
class Call:
    """One API request and how to read its answer (``model``: None for no body)."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    model: Any = None  # a model class, list[model], or None
    retry_safe: bool = True  # may be sent again after the server may have seen it
    headers: dict[str, str] = field(default_factory=dict)


def _clean(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _call(method: str, path: str, **kwargs: Any) -> Call:
    if method == "POST":
        kwargs.setdefault("headers", {})["Idempotency-Key"] = uuid.uuid4().hex
    elif method in ("PATCH", "DELETE"):
        kwargs.setdefault("retry_safe", False)
    if kwargs.get("params") is not None:
        kwargs["params"] = _clean(kwargs["params"])
    return Call(method, path, **kwargs)


def _parse(call: Call, response: httpx.Response) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = None
        raise error_from_response(response.status_code, body)
    if call.model is None or response.status_code == 204:
        return None
    data = response.json()
    origin = getattr(call.model, "__origin__", None)
    if origin is list:
        (item,) = call.model.__args__
        return [item.model_validate(row) for row in data]
    return call.model.model_validate(data)


def _retry_delay(attempt: int, response: httpx.Response | None) -> float:
    header = response.headers.get("Retry-After") if response is not None else None
    if header and header.isdigit():
        return min(float(header), MAX_RETRY_AFTER_S)
    return min(0.25 * 2.0**attempt, 5.0) * (0.5 + random.random() / 2)  # jitter


def _should_retry(call: Call, response: httpx.Response | None, exc: Exception | None) -> bool:
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return True  # never reached the server: any method is safe to send again
    if not call.retry_safe:
        return False
    if exc is not None:
        return isinstance(exc, httpx.TransportError)
    return response is not None and response.status_code in RETRY_STATUSES


def _credentials(url: str | None, key: str | None) -> config.Credentials:
    found = config.load(url, key)
    if found is None:
        raise PlinthError(
            f"no Plinth URL and key: pass them, set {config.URL_ENV} and {config.KEY_ENV}, "
            "or run `plinth login`",
            code="not_configured",
        )
    return found


class _Resource:
    def __init__(self, client: Any) -> None:
        self._c = client


class Endpoints(_Resource):
    """Endpoints (``/deployments``), addressed by id or slug."""

    def list(
        self,
        *,
        status: str | None = None,
        search: str | None = None,
        cluster: str | None = None,
        labels: dict[str, str] | None = None,
        page_size: int = DEFAULT_PAGE,
    ) -> Any:
        """Every matching endpoint, page after page (an iterator; async: an async iterator)."""
        label = [f"{k}={v}" for k, v in (labels or {}).items()] or None
        params = {"status": status, "search": search, "cluster": cluster, "label": label}
        return self._c._pages(f"{API}/deployments", _clean(params), models.DeploymentOut, page_size)

    def get(self, endpoint: str) -> models.DeploymentDetailOut:
        return cast(
            "models.DeploymentDetailOut",
            self._c._call(
                _call("GET", f"{API}/deployments/{endpoint}", model=models.DeploymentDetailOut)
            ),
        )

    def create(
        self,
        slug: str,
        spec: dict[str, Any],
        *,
        name: str = "",
        labels: dict[str, str] | None = None,
        cluster_id: str | None = None,
        replicas: int | None = None,
        message: str = "",
    ) -> models.DeploymentDetailOut:
        body = _clean(
            {
                "slug": slug,
                "name": name,
                "spec": spec,
                "labels": labels,
                "cluster_id": cluster_id,
                "replicas": replicas,
                "message": message,
            }
        )
        return cast(
            "models.DeploymentDetailOut",
            self._c._call(
                _call("POST", f"{API}/deployments", json=body, model=models.DeploymentDetailOut)
            ),
        )

    def update(
        self,
        endpoint: str,
        spec: dict[str, Any],
        *,
        base_revision: int,
        message: str = "",
        name: str | None = None,
        labels: dict[str, str] | None = None,
    ) -> models.DeploymentDetailOut:
        """New settings as a new revision; :class:`~plinth.errors.Conflict` when
        ``base_revision`` is no longer the endpoint's ``target_revision`` (its settings changed
        meanwhile)."""
        body = _clean(
            {
                "spec": spec,
                "base_revision": base_revision,
                "message": message,
                "name": name,
                "labels": labels,
            }
        )
        return cast(
            "models.DeploymentDetailOut",
            self._c._call(
                _call(
                    "PATCH",
                    f"{API}/deployments/{endpoint}",
                    json=body,
                    model=models.DeploymentDetailOut,
                )
            ),
        )

    def rollback(
        self, endpoint: str, to_revision: int, *, message: str = ""
    ) -> models.DeploymentDetailOut:
        body = {"to_revision": to_revision, "message": message}
        return cast(
            "models.DeploymentDetailOut",
            self._c._call(
                _call(
                    "POST",
                    f"{API}/deployments/{endpoint}/rollback",
                    json=body,
                    model=models.DeploymentDetailOut,
                )
            ),
        )

    def scale(self, endpoint: str, replicas: int) -> models.DeploymentOut:
        return cast(
            "models.DeploymentOut",
            self._c._call(
                _call(
                    "POST",
                    f"{API}/deployments/{endpoint}/scale",
                    json={"replicas": replicas},
                    model=models.DeploymentOut,
                )
            ),
        )

    def stop(self, endpoint: str) -> models.DeploymentOut:
        return cast(
            "models.DeploymentOut",
            self._c._call(
                _call("POST", f"{API}/deployments/{endpoint}/stop", model=models.DeploymentOut)
            ),
        )

    def start(self, endpoint: str) -> models.DeploymentOut:
        return cast(
            "models.DeploymentOut",
            self._c._call(
                _call("POST", f"{API}/deployments/{endpoint}/start", model=models.DeploymentOut)
            ),
        )

    def delete(self, endpoint: str) -> models.DeploymentOut:
        return cast(
            "models.DeploymentOut",
            self._c._call(
                _call("DELETE", f"{API}/deployments/{endpoint}", model=models.DeploymentOut)
            ),
        )

    def validate(
        self, spec: dict[str, Any], *, compare_to: str | None = None, cluster_id: str | None = None
    ) -> models.ValidateOut:
        """Check settings without deploying; ``compare_to`` (an endpoint) also lists what saving
        them there would change (``changes``) and the revision compared with."""
        body = _clean({"spec": spec, "deployment": compare_to, "cluster_id": cluster_id})
        return cast(
            "models.ValidateOut",
            self._c._call(_call("POST", f"{API}/validate", json=body, model=models.ValidateOut)),
        )

    def events(
        self, endpoint: str, *, level: str | None = None, page_size: int = DEFAULT_PAGE
    ) -> Any:
        return self._c._pages(
            f"{API}/deployments/{endpoint}/events",
            _clean({"level": level}),
            models.EventOut,
            page_size,
        )

    def wait_until_settled(
        self, endpoint: str, *, timeout: float = 600, interval: float = 2
    ) -> Any:
        """Poll until the endpoint is settled (or failed) and return it; TimeoutError past
        ``timeout`` seconds."""
        return self._c._wait(lambda: self.get(endpoint), timeout, interval)


class Revisions(_Resource):
    def list(self, endpoint: str, *, page_size: int = DEFAULT_PAGE) -> Any:
        return self._c._pages(
            f"{API}/deployments/{endpoint}/revisions", {}, models.RevisionSummaryOut, page_size
        )

    def get(self, endpoint: str, number: int) -> models.RevisionOut:
        return cast(
            "models.RevisionOut",
            self._c._call(
                _call(
                    "GET",
                    f"{API}/deployments/{endpoint}/revisions/{number}",
                    model=models.RevisionOut,
                )
            ),
        )

    def diff(self, endpoint: str, from_revision: int, to_revision: int) -> models.DiffOut:
        return cast(
            "models.DiffOut",
            self._c._call(
                _call(
                    "GET",
                    f"{API}/deployments/{endpoint}/revisions/diff",
                    params={"from": from_revision, "to": to_revision},
                    model=models.DiffOut,
                )
            ),
        )


class Canaries(_Resource):
    """An endpoint's canary: a settings change on a share of its traffic beside the serving
    revision, promoted or aborted (automatically when it regresses past its thresholds)."""

    def start(
        self,
        endpoint: str,
        spec: dict[str, Any],
        *,
        weight: int,
        sticky: bool = False,
        replicas: int = 1,
        thresholds: dict[str, Any] | None = None,
        message: str = "",
    ) -> models.CanaryOut:
        body = _clean(
            {
                "spec": spec,
                "weight": weight,
                "sticky": sticky,
                "replicas": replicas,
                "thresholds": thresholds,
                "message": message,
            }
        )
        return self._post(f"{API}/deployments/{endpoint}/canary", body)

    def get(self, endpoint: str) -> models.CanaryOut:
        """The running canary, else the last one."""
        return cast(
            "models.CanaryOut",
            self._c._call(
                _call("GET", f"{API}/deployments/{endpoint}/canary", model=models.CanaryOut)
            ),
        )

    def promote(self, endpoint: str, *, message: str = "") -> models.CanaryOut:
        body = {"message": message}
        return self._post(f"{API}/deployments/{endpoint}/canary/promote", body)

    def abort(self, endpoint: str, *, reason: str = "") -> models.CanaryOut:
        return self._post(f"{API}/deployments/{endpoint}/canary/abort", {"reason": reason})

    def _post(self, path: str, body: dict[str, Any]) -> models.CanaryOut:
        return cast(
            "models.CanaryOut",
            self._c._call(_call("POST", path, json=body, model=models.CanaryOut)),
        )


class Benchmarks(_Resource):
    """An endpoint's benchmarks: NVIDIA AIPerf against its gateway URL, one traffic profile,
    results per load point beside the optimizer's prediction; two compared with deltas."""

    def run(
        self,
        endpoint: str,
        *,
        profile: dict[str, Any] | None = None,
        name: str = "",
        revision: int | None = None,
    ) -> models.BenchmarkOut:
        """Queue a benchmark (it runs in the background; ``get`` shows its progress)."""
        body = _clean({"profile": profile, "name": name, "revision": revision})
        path = f"{API}/deployments/{endpoint}/benchmarks"
        return cast(
            "models.BenchmarkOut",
            self._c._call(_call("POST", path, json=body, model=models.BenchmarkOut)),
        )

    def list(self, endpoint: str) -> list[models.BenchmarkOut]:
        path = f"{API}/deployments/{endpoint}/benchmarks"
        return cast(
            "list[models.BenchmarkOut]",
            self._c._call(_call("GET", path, model=list[models.BenchmarkOut])),
        )

    def get(self, endpoint: str, benchmark_id: str) -> models.BenchmarkOut:
        path = f"{API}/deployments/{endpoint}/benchmarks/{benchmark_id}"
        return cast(
            "models.BenchmarkOut", self._c._call(_call("GET", path, model=models.BenchmarkOut))
        )

    def compare(self, endpoint: str, a: str, b: str) -> models.CompareOut:
        """Benchmarks ``a`` and ``b`` side by side: per load point, each figure's b - a."""
        path = f"{API}/deployments/{endpoint}/benchmarks/compare"
        return cast(
            "models.CompareOut",
            self._c._call(_call("GET", path, params={"a": a, "b": b}, model=models.CompareOut)),
        )


# The endpoint's own settings that applying a recommendation keeps: the same lists as the
# server's deployments/endpoints/recommend.py (KEPT_MODEL_FIELDS, KEPT_GROUPS), which the console's
# "Apply" uses; the SDK installs without Django, so they are repeated here and a test keeps them
# equal.
KEPT_MODEL_FIELDS = (
    "served_name",
    "revision",
    "hf_token_secret",
    "trust_remote_code",
    "architecture",
)
KEPT_GROUPS = ("runtime",)

Objective = Literal["cost", "throughput"]


class OptimizerMismatch(ValidationFailed):
    """A recommendation for another model than the endpoint serves (applying it would silently
    change what the endpoint answers with)."""


def optimizer_message(label: str) -> str:
    """The revision message of an applied pick, as the console writes it."""
    return f"from the optimizer: {label}"


def fit_candidate(
    current: Mapping[str, Any], candidate: Mapping[str, Any], *, endpoint: str = "the endpoint"
) -> dict[str, Any]:
    """A candidate's spec fitted to an endpoint whose settings are ``current``: the endpoint keeps
    its identity and runtime settings; :class:`OptimizerMismatch` for another model's pick."""
    model = dict(candidate.get("model") or {})
    current_model = current.get("model") or {}
    if current_model.get("source") not in (None, model.get("source")):
        message = (
            f"{endpoint} serves {current_model.get('source')}; this recommendation is for "
            f"{model.get('source')}"
        )
        raise OptimizerMismatch(
            message,
            code="model_mismatch",
            fields=[FieldError("model", "model_mismatch", message, "optimize for its model")],
        )
    for name in KEPT_MODEL_FIELDS:
        if current_model.get(name) is not None:
            model[name] = current_model[name]
    kept = {group: current[group] for group in KEPT_GROUPS if group in current}
    return {**candidate, **kept, "model": model}


class Optimizer(_Resource):
    """``client.optimize(model, ...)``: ranked settings for a traffic profile with predicted
    TTFT, ITL, throughput and cost and their reasons (``confirm``: the top picks also measured
    by a short simulated run). A dry run any member may make; pass a whole
    :class:`~plinth.models.OptimizeIn` instead of ``model`` to send it as it is."""

    def __call__(
        self,
        model: str | models.OptimizeIn,
        *,
        gpus: Sequence[str] | None = None,
        traffic: models.TrafficIn | Mapping[str, Any] | None = None,
        slo: models.SloIn | Mapping[str, Any] | None = None,
        limits: models.LimitsIn | Mapping[str, Any] | None = None,
        objective: Objective | None = None,
        cluster_id: str | None = None,
        confirm: bool | None = None,
        confirm_top: int | None = None,
        architecture: models.Architecture | Mapping[str, Any] | None = None,
    ) -> models.OptimizeOut:
        if isinstance(model, models.OptimizeIn):
            request = model
        else:
            fields = {
                "model": model,
                "gpus": list(gpus) if gpus is not None else None,
                "traffic": traffic,
                "slo": slo,
                "limits": limits,
                "objective": objective,
                "cluster_id": cluster_id,
                "confirm": confirm,
                "confirm_top": confirm_top,
                "architecture": architecture,
            }
            request = models.OptimizeIn.model_validate(_clean(fields))
        # Unset optional figures are left out rather than sent as null: the server's defaults
        # (and its rule that rate and concurrency are one or the other) then apply.
        body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
        return cast(
            "models.OptimizeOut",
            self._c._call(_call("POST", f"{API}/optimize", json=body, model=models.OptimizeOut)),
        )


class Gates(_Resource):
    """A revision's KL-divergence quality gate: the baseline's answers scored under a canary's
    revision and its baseline; the canary is promoted only once it passes (or an admin
    overrides it with a reason)."""

    def run(
        self,
        endpoint: str,
        revision: int,
        *,
        max_mean_kl: float | None = None,
        min_top1_agreement: float | None = None,
        prompts_jsonl: str = "",
        max_new_tokens: int | None = None,
    ) -> models.GateOut:
        """Queue a gate run (it runs in the background; ``get`` shows its verdict)."""
        body = _clean(
            {
                "max_mean_kl": max_mean_kl,
                "min_top1_agreement": min_top1_agreement,
                "prompts_jsonl": prompts_jsonl or None,
                "max_new_tokens": max_new_tokens,
            }
        )
        return self._gate("POST", endpoint, revision, "", body)

    def get(self, endpoint: str, revision: int) -> models.GateOut:
        """Revision ``revision``'s gate (its latest run), with its results once it ran."""
        return self._gate("GET", endpoint, revision, "", None)

    def list(self, endpoint: str, *, page_size: int = DEFAULT_PAGE) -> Any:
        """Every gate run of the endpoint, of any revision, newest first."""
        return self._c._pages(f"{API}/deployments/{endpoint}/gates", {}, models.GateOut, page_size)

    def override(self, endpoint: str, revision: int, *, reason: str) -> models.GateOut:
        """Admins: let a failed gate's revision serve; the reason is audited."""
        return self._gate("POST", endpoint, revision, "/override", {"reason": reason})

    def _gate(
        self, method: str, endpoint: str, revision: int, tail: str, body: dict[str, Any] | None
    ) -> models.GateOut:
        path = f"{API}/deployments/{endpoint}/revisions/{revision}/gate{tail}"
        return cast(
            "models.GateOut",
            self._c._call(_call(method, path, json=body, model=models.GateOut)),
        )


class Keys(_Resource):
    def list(self, *, page_size: int = DEFAULT_PAGE) -> Any:
        return self._c._pages(f"{API}/api-keys", {}, models.ApiKeyOut, page_size)

    def create(
        self, name: str, *, kind: str = "management", role: str = "developer", **extra: Any
    ) -> models.ApiKeyCreatedOut:
        """A new key; its secret (``.key``) is in this answer only."""
        body = {"name": name, "kind": kind, "role": role, **extra}
        return cast(
            "models.ApiKeyCreatedOut",
            self._c._call(
                _call("POST", f"{API}/api-keys", json=body, model=models.ApiKeyCreatedOut)
            ),
        )

    def update(
        self,
        key_id: str,
        *,
        requests_per_minute: int | None = UNCHANGED,
        tokens_per_minute: int | None = UNCHANGED,
    ) -> models.ApiKeyOut:
        """Change an inference key's per-minute limits: ``None`` lifts one, one left out stays."""
        given = {"requests_per_minute": requests_per_minute, "tokens_per_minute": tokens_per_minute}
        body = {name: value for name, value in given.items() if value is not UNCHANGED}
        return cast(
            "models.ApiKeyOut",
            self._c._call(
                _call("PATCH", f"{API}/api-keys/{key_id}", json=body, model=models.ApiKeyOut)
            ),
        )

    def revoke(self, key_id: str) -> models.ApiKeyOut:
        return cast(
            "models.ApiKeyOut",
            self._c._call(_call("DELETE", f"{API}/api-keys/{key_id}", model=models.ApiKeyOut)),
        )


class Usage(_Resource):
    def get(
        self, endpoint: str | None = None, *, start: str | None = None, end: str | None = None
    ) -> models.UsageOut:
        """Tokens and requests by key, of one endpoint or all of them (ISO 8601 bounds)."""
        path = f"{API}/deployments/{endpoint}/usage" if endpoint else f"{API}/usage"
        return cast(
            "models.UsageOut",
            self._c._call(
                _call("GET", path, params={"start": start, "end": end}, model=models.UsageOut)
            ),
        )


class Logs(_Resource):
    def read(
        self,
        endpoint: str,
        *,
        replica: str | None = None,
        tail: int | None = None,
        after: str | None = None,
        previous: bool | None = None,
    ) -> models.LogsOut:
        """One answer of the logs route (a page of lines and the cursor for the next)."""
        params = {"replica": replica, "tail": tail, "after": after, "previous": previous}
        return cast(
            "models.LogsOut",
            self._c._call(
                _call(
                    "GET", f"{API}/deployments/{endpoint}/logs", params=params, model=models.LogsOut
                )
            ),
        )

    def lines(
        self,
        endpoint: str,
        *,
        follow: bool = False,
        replica: str | None = None,
        tail: int | None = None,
        interval: float = 2.0,
    ) -> Any:
        """Log lines as an iterator; with ``follow`` it waits for new lines (passing each
        answer's cursor back) until the caller stops iterating."""
        return self._c._follow(self, endpoint, follow, replica, tail, interval)


class Secrets(_Resource):
    def list(self, *, page_size: int = DEFAULT_PAGE) -> Any:
        return self._c._pages(f"{API}/secrets", {}, models.SecretOut, page_size)

    def set(self, name: str, value: str, *, description: str = "") -> models.SecretOut:
        body = {"name": name, "value": value, "description": description}
        return cast(
            "models.SecretOut",
            self._c._call(_call("POST", f"{API}/secrets", json=body, model=models.SecretOut)),
        )

    def delete(self, secret_id: str) -> None:
        return cast("None", self._c._call(_call("DELETE", f"{API}/secrets/{secret_id}")))


class Clusters(_Resource):
    def list(self, *, page_size: int = DEFAULT_PAGE) -> Any:
        return self._c._pages(f"{API}/clusters", {}, models.ClusterOut, page_size)

    def get(self, cluster_id: str) -> models.ClusterOut:
        return cast(
            "models.ClusterOut",
            self._c._call(_call("GET", f"{API}/clusters/{cluster_id}", model=models.ClusterOut)),
        )


class Audit(_Resource):
    def list(
        self,
        *,
        action: str | None = None,
        actor: str | None = None,
        since: str | None = None,
        target_id: str | None = None,
        page_size: int = DEFAULT_PAGE,
    ) -> Any:
        params = _clean({"action": action, "actor": actor, "since": since, "target_id": target_id})
        return self._c._pages(f"{API}/audit", params, models.AuditEventOut, page_size)


class _Base:
    def __init__(self) -> None:
        self.endpoints = Endpoints(self)
        self.revisions = Revisions(self)
        self.canaries = Canaries(self)
        self.benchmarks = Benchmarks(self)
        self.optimize = Optimizer(self)
        self.gates = Gates(self)
        self.keys = Keys(self)
        self.usage = Usage(self)
        self.logs = Logs(self)
        self.secrets = Secrets(self)
        self.clusters = Clusters(self)
        self.audit = Audit(self)


def _settled(endpoint: Any) -> bool:
    return bool(endpoint.settled) or endpoint.status == "failed"


class Plinth(_Base):
    """The synchronous client. ``Plinth()`` reads ``PLINTH_URL``/``PLINTH_API_KEY`` or the
    file ``plinth login`` wrote."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = 30,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__()
        creds = _credentials(url, key)
        self.url, self.retries = creds.url, retries
        self._http = httpx.Client(
            base_url=creds.url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {creds.key}", "User-Agent": "plinth-client"},
        )

    def __enter__(self) -> Plinth:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, call: Call) -> Any:
        for attempt in range(self.retries + 1):
            response, error = None, None
            try:
                response = self._http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=call.headers
                )
            except httpx.HTTPError as exc:
                error = exc
            if attempt < self.retries and _should_retry(call, response, error):
                time.sleep(_retry_delay(attempt, response))
                continue
            if error is not None:
                raise ConnectionFailed(
                    f"cannot reach {self.url}: {error}", code="unreachable"
                ) from error
            assert response is not None
            return _parse(call, response)
        raise AssertionError("unreachable")

    def _pages(self, path: str, params: dict[str, Any], model: type[M], size: int) -> Iterator[M]:
        offset = 0
        while True:
            page = self._call(
                _call(
                    "GET",
                    path,
                    params={**params, "limit": size, "offset": offset},
                    model=dict_model,
                )
            )
            yield from (model.model_validate(item) for item in page.items)
            offset += size
            if page.next is None:
                return

    def _wait(self, get: Callable[[], Any], timeout: float, interval: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            endpoint = get()
            if _settled(endpoint):
                return endpoint
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{endpoint.slug} is still {endpoint.status} after {timeout}s")
            time.sleep(interval)

    def _follow(
        self,
        logs: Logs,
        endpoint: str,
        follow: bool,
        replica: str | None,
        tail: int | None,
        interval: float,
    ) -> Iterator[models.LogLineOut]:
        answer = logs.read(endpoint, replica=replica, tail=tail)
        while True:
            yield from answer.lines
            if not (follow or answer.more):
                return
            if not answer.more:
                time.sleep(interval)
            answer = logs.read(
                endpoint, replica=answer.replica or replica, after=answer.cursor or None
            )


class AsyncPlinth(_Base):
    """The asyncio client: the same resources, each method awaited (``list`` and log lines
    are async iterators)."""

    # The resources are the sync client's classes, whose methods here return awaitables of
    # their annotated types. Python's typing cannot say "the same methods, awaited" without
    # writing every signature twice, so they are Any to a type checker rather than wrong.
    endpoints: Any
    revisions: Any
    optimize: Any
    keys: Any
    usage: Any
    logs: Any
    secrets: Any
    clusters: Any
    audit: Any

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = 30,
        retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__()
        creds = _credentials(url, key)
        self.url, self.retries = creds.url, retries
        self._http = httpx.AsyncClient(
            base_url=creds.url,
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {creds.key}", "User-Agent": "plinth-client"},
        )

    async def __aenter__(self) -> AsyncPlinth:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, call: Call) -> Any:
        for attempt in range(self.retries + 1):
            response, error = None, None
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=call.headers
                )
            except httpx.HTTPError as exc:
                error = exc
            if attempt < self.retries and _should_retry(call, response, error):
                await asyncio.sleep(_retry_delay(attempt, response))
                continue
            if error is not None:
                raise ConnectionFailed(
                    f"cannot reach {self.url}: {error}", code="unreachable"
                ) from error
            assert response is not None
            return _parse(call, response)
        raise AssertionError("unreachable")

    async def _pages(
        self, path: str, params: dict[str, Any], model: type[M], size: int
    ) -> AsyncIterator[M]:
        offset = 0
        while True:
            page = await self._call(
                _call(
                    "GET",
                    path,
                    params={**params, "limit": size, "offset": offset},
                    model=dict_model,
                )
            )
            for item in page.items:
                yield model.model_validate(item)
            offset += size
            if page.next is None:
                return

    async def _wait(self, get: Callable[[], Any], timeout: float, interval: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            endpoint = await get()
            if _settled(endpoint):
                return endpoint
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{endpoint.slug} is still {endpoint.status} after {timeout}s")
            await asyncio.sleep(interval)

    async def _follow(
        self,
        logs: Any,  # Logs, whose methods return awaitables here
        endpoint: str,
        follow: bool,
        replica: str | None,
        tail: int | None,
        interval: float,
    ) -> AsyncIterator[models.LogLineOut]:
        answer = await logs.read(endpoint, replica=replica, tail=tail)
        while True:
            for line in answer.lines:
                yield line
            if not (follow or answer.more):
                return
            if not answer.more:
                await asyncio.sleep(interval)
            answer = await logs.read(
                endpoint, replica=answer.replica or replica, after=answer.cursor or None
            )


class _Page(BaseModel):
    items: list[dict[str, Any]]
    count: int
    next: str | None = None


dict_model = _Page
