"""The API's resources as the clients expose them (``client.endpoints``, ``client.keys``, ...).

Every method is written once and returns what its client's ``_call`` returns: the parsed model
for :class:`~plinth.client.Plinth`, an awaitable of it for :class:`~plinth.client.AsyncPlinth`.
Listing, waiting and following logs are the clients' own (``_pages``, ``_wait``, ``_follow``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from plinth import models
from plinth.transport import API, DEFAULT_PAGE, UNCHANGED, clean, request


class Resource:
    """A group of API routes, sent through ``client``."""

    def __init__(self, client: Any) -> None:
        self._c = client


class Endpoints(Resource):
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
        return self._c._pages(f"{API}/deployments", clean(params), models.DeploymentOut, page_size)

    def get(self, endpoint: str) -> models.DeploymentDetailOut:
        return cast(
            "models.DeploymentDetailOut",
            self._c._call(
                request("GET", f"{API}/deployments/{endpoint}", model=models.DeploymentDetailOut)
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
        body = clean(
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
                request("POST", f"{API}/deployments", json=body, model=models.DeploymentDetailOut)
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
        body = clean(
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
                request(
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
                request(
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
                request(
                    "POST",
                    f"{API}/deployments/{endpoint}/scale",
                    json={"replicas": replicas},
                    model=models.DeploymentOut,
                )
            ),
        )

    def place(
        self, endpoint: str, *, policy: str, clusters: Sequence[dict[str, Any]]
    ) -> models.PlacementOut:
        """Place the endpoint on ``clusters`` (``{"cluster", "min_replicas", "weight"}``, its
        home first) with ``policy`` (cheapest, spread, weighted): no new revision."""
        body = {"policy": policy, "clusters": [dict(c) for c in clusters]}
        return cast(
            "models.PlacementOut",
            self._c._call(
                request(
                    "PUT",
                    f"{API}/deployments/{endpoint}/placement",
                    json=body,
                    model=models.PlacementOut,
                )
            ),
        )

    def stop(self, endpoint: str) -> models.DeploymentOut:
        return cast(
            "models.DeploymentOut",
            self._c._call(
                request("POST", f"{API}/deployments/{endpoint}/stop", model=models.DeploymentOut)
            ),
        )

    def start(self, endpoint: str) -> models.DeploymentOut:
        return cast(
            "models.DeploymentOut",
            self._c._call(
                request("POST", f"{API}/deployments/{endpoint}/start", model=models.DeploymentOut)
            ),
        )

    def delete(self, endpoint: str) -> models.DeploymentOut:
        return cast(
            "models.DeploymentOut",
            self._c._call(
                request("DELETE", f"{API}/deployments/{endpoint}", model=models.DeploymentOut)
            ),
        )

    def validate(
        self, spec: dict[str, Any], *, compare_to: str | None = None, cluster_id: str | None = None
    ) -> models.ValidateOut:
        """Check settings without deploying; ``compare_to`` (an endpoint) also lists what saving
        them there would change (``changes``) and the revision compared with."""
        body = clean({"spec": spec, "deployment": compare_to, "cluster_id": cluster_id})
        return cast(
            "models.ValidateOut",
            self._c._call(request("POST", f"{API}/validate", json=body, model=models.ValidateOut)),
        )

    def events(
        self, endpoint: str, *, level: str | None = None, page_size: int = DEFAULT_PAGE
    ) -> Any:
        return self._c._pages(
            f"{API}/deployments/{endpoint}/events",
            clean({"level": level}),
            models.EventOut,
            page_size,
        )

    def model_accuracy(
        self, endpoint: str, *, revision: int | None = None
    ) -> models.ModelAccuracyOut:
        """The serving revision's (or ``revision``'s) performance model against what it
        measured: predicted and measured TTFT/ITL p90 (throughput from its latest benchmark),
        the correction in force and its error band."""
        return cast(
            "models.ModelAccuracyOut",
            self._c._call(
                request(
                    "GET",
                    f"{API}/deployments/{endpoint}/model-accuracy",
                    params={"revision": revision},
                    model=models.ModelAccuracyOut,
                )
            ),
        )

    def wait_until_settled(
        self, endpoint: str, *, timeout: float = 600, interval: float = 2
    ) -> Any:
        """Poll until the endpoint is settled (or failed) and return it; TimeoutError past
        ``timeout`` seconds."""
        return self._c._wait(lambda: self.get(endpoint), timeout, interval)


class Revisions(Resource):
    def list(self, endpoint: str, *, page_size: int = DEFAULT_PAGE) -> Any:
        return self._c._pages(
            f"{API}/deployments/{endpoint}/revisions", {}, models.RevisionSummaryOut, page_size
        )

    def get(self, endpoint: str, number: int) -> models.RevisionOut:
        return cast(
            "models.RevisionOut",
            self._c._call(
                request(
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
                request(
                    "GET",
                    f"{API}/deployments/{endpoint}/revisions/diff",
                    params={"from": from_revision, "to": to_revision},
                    model=models.DiffOut,
                )
            ),
        )


class Adapters(Resource):
    """An endpoint's LoRA adapters; each add or remove is a new revision, applied to the running
    replicas without a restart where SGLang allows it."""

    def list(self, endpoint: str) -> models.AdaptersOut:
        """The adapters with their traffic (requests and tokens, last hour and day)."""
        return self._adapters("GET", endpoint)

    def add(
        self,
        endpoint: str,
        name: str,
        source: str,
        rank: int,
        *,
        revision: str | None = None,
        pinned: bool = False,
        message: str = "",
    ) -> models.AdaptersOut:
        body = clean(
            {"name": name, "source": source, "rank": rank, "revision": revision,
             "pinned": pinned, "message": message}
        )  # fmt: skip
        return self._adapters("POST", endpoint, json=body)

    def remove(self, endpoint: str, name: str) -> models.AdaptersOut:
        return self._adapters("DELETE", endpoint, f"/{name}")

    def _adapters(
        self, method: str, endpoint: str, tail: str = "", **extra: Any
    ) -> models.AdaptersOut:
        path = f"{API}/deployments/{endpoint}/adapters{tail}"
        return cast(
            "models.AdaptersOut",
            self._c._call(request(method, path, model=models.AdaptersOut, **extra)),
        )


class Canaries(Resource):
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
        body = clean(
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
                request("GET", f"{API}/deployments/{endpoint}/canary", model=models.CanaryOut)
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
            self._c._call(request("POST", path, json=body, model=models.CanaryOut)),
        )


class Benchmarks(Resource):
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
        body = clean({"profile": profile, "name": name, "revision": revision})
        path = f"{API}/deployments/{endpoint}/benchmarks"
        return cast(
            "models.BenchmarkOut",
            self._c._call(request("POST", path, json=body, model=models.BenchmarkOut)),
        )

    def list(self, endpoint: str) -> list[models.BenchmarkOut]:
        path = f"{API}/deployments/{endpoint}/benchmarks"
        return cast(
            "list[models.BenchmarkOut]",
            self._c._call(request("GET", path, model=list[models.BenchmarkOut])),
        )

    def get(self, endpoint: str, benchmark_id: str) -> models.BenchmarkOut:
        path = f"{API}/deployments/{endpoint}/benchmarks/{benchmark_id}"
        return cast(
            "models.BenchmarkOut", self._c._call(request("GET", path, model=models.BenchmarkOut))
        )

    def compare(self, endpoint: str, a: str, b: str) -> models.CompareOut:
        """Benchmarks ``a`` and ``b`` side by side: per load point, each figure's b - a."""
        path = f"{API}/deployments/{endpoint}/benchmarks/compare"
        return cast(
            "models.CompareOut",
            self._c._call(request("GET", path, params={"a": a, "b": b}, model=models.CompareOut)),
        )


class Gates(Resource):
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
        body = clean(
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
            self._c._call(request(method, path, json=body, model=models.GateOut)),
        )


class Keys(Resource):
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
                request("POST", f"{API}/api-keys", json=body, model=models.ApiKeyCreatedOut)
            ),
        )

    def update(
        self,
        key_id: str,
        *,
        requests_per_minute: int | None = UNCHANGED,
        tokens_per_minute: int | None = UNCHANGED,
        priority: str = UNCHANGED,
        weight: int = UNCHANGED,
    ) -> models.ApiKeyOut:
        """Change an inference key's per-minute limits (``None`` lifts one) and its priority
        class (critical, standard, batch) and weight under overload; one left out stays."""
        given = {
            "requests_per_minute": requests_per_minute,
            "tokens_per_minute": tokens_per_minute,
            "priority": priority,
            "weight": weight,
        }
        body = {name: value for name, value in given.items() if value is not UNCHANGED}
        return cast(
            "models.ApiKeyOut",
            self._c._call(
                request("PATCH", f"{API}/api-keys/{key_id}", json=body, model=models.ApiKeyOut)
            ),
        )

    def revoke(self, key_id: str) -> models.ApiKeyOut:
        return cast(
            "models.ApiKeyOut",
            self._c._call(request("DELETE", f"{API}/api-keys/{key_id}", model=models.ApiKeyOut)),
        )


class Usage(Resource):
    def get(
        self, endpoint: str | None = None, *, start: str | None = None, end: str | None = None
    ) -> models.UsageOut:
        """Tokens and requests by key, of one endpoint or all of them (ISO 8601 bounds)."""
        path = f"{API}/deployments/{endpoint}/usage" if endpoint else f"{API}/usage"
        return cast(
            "models.UsageOut",
            self._c._call(
                request("GET", path, params={"start": start, "end": end}, model=models.UsageOut)
            ),
        )


class Costs(Resource):
    def get(self, *, by: str = "endpoint", month: str | None = None) -> models.CostsOut:
        """GPU-hours and cost of a month (YYYY-MM; default this month) by endpoint and
        revision, or by key (the rest idle/unattributed)."""
        return cast(
            "models.CostsOut",
            self._c._call(
                request(
                    "GET", f"{API}/costs", params={"by": by, "month": month}, model=models.CostsOut
                )
            ),
        )


class Logs(Resource):
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
                request(
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


class Secrets(Resource):
    def list(self, *, page_size: int = DEFAULT_PAGE) -> Any:
        return self._c._pages(f"{API}/secrets", {}, models.SecretOut, page_size)

    def set(self, name: str, value: str, *, description: str = "") -> models.SecretOut:
        body = {"name": name, "value": value, "description": description}
        return cast(
            "models.SecretOut",
            self._c._call(request("POST", f"{API}/secrets", json=body, model=models.SecretOut)),
        )

    def delete(self, secret_id: str) -> None:
        return cast("None", self._c._call(request("DELETE", f"{API}/secrets/{secret_id}")))


class Clusters(Resource):
    def list(self, *, page_size: int = DEFAULT_PAGE) -> Any:
        return self._c._pages(f"{API}/clusters", {}, models.ClusterOut, page_size)

    def get(self, cluster_id: str) -> models.ClusterOut:
        return cast(
            "models.ClusterOut",
            self._c._call(request("GET", f"{API}/clusters/{cluster_id}", model=models.ClusterOut)),
        )

    def drain(self, cluster: str, *, undo: bool = False) -> models.DrainOut:
        """Drain ``cluster`` (id or name): endpoints move off it, new replicas ready first;
        ``undo`` ends the drain."""
        verb = "undrain" if undo else "drain"
        return cast(
            "models.DrainOut",
            self._c._call(
                request("POST", f"{API}/clusters/{cluster}/{verb}", model=models.DrainOut)
            ),
        )


class Audit(Resource):
    def list(
        self,
        *,
        action: str | None = None,
        actor: str | None = None,
        since: str | None = None,
        target_id: str | None = None,
        page_size: int = DEFAULT_PAGE,
    ) -> Any:
        params = clean({"action": action, "actor": actor, "since": since, "target_id": target_id})
        return self._c._pages(f"{API}/audit", params, models.AuditEventOut, page_size)
