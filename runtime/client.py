"""HTTP clients of one SGLang engine and of the smg router. Framework-free (no Django).

Used by the probe task (metrics, loads), the local driver (readiness, router worker list) and
tests. Every call has a short timeout and raises ``RuntimeUnavailable`` on connection errors,
timeouts and unexpected statuses, so callers handle one exception.

``api_key`` is the endpoint's engine key (``--api-key`` of SGLang and smg): sent as a bearer
token on every call. Probes (``/health*``, ``/ready``, ``/metrics``; smg's ``/liveness`` and
``/readiness``) answer without it; ``/v1/loads``, ``/server_info`` and smg's ``/workers`` do not.
"""

from __future__ import annotations

from typing import Any, Self

import httpx

from runtime.metrics import MetricsSnapshot, parse_metrics

DEFAULT_TIMEOUT_S = 5.0


class RuntimeUnavailable(Exception):
    """The engine or router did not answer as expected."""


class _HttpClient:
    def __init__(
        self, base_url: str, *, timeout: float = DEFAULT_TIMEOUT_S, api_key: str = ""
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout, trust_env=False, headers=headers
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(self, path: str, **params: str) -> httpx.Response:
        try:
            return self._http.get(path, params=params or None)
        except httpx.HTTPError as exc:
            raise RuntimeUnavailable(f"{self.base_url}{path}: {type(exc).__name__}") from exc

    def _ok(self, path: str) -> bool:
        try:
            return self._get(path).status_code == 200
        except RuntimeUnavailable:
            return False

    def _json(self, path: str, **params: str) -> Any:
        response = self._get(path, **params)
        if response.status_code != 200:
            raise RuntimeUnavailable(f"{self.base_url}{path}: HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError as exc:
            raise RuntimeUnavailable(f"{self.base_url}{path}: not JSON") from exc

    def _metrics(self, path: str = "/metrics") -> MetricsSnapshot:
        response = self._get(path)
        if response.status_code != 200:
            raise RuntimeUnavailable(f"{self.base_url}{path}: HTTP {response.status_code}")
        try:
            return parse_metrics(response.text)
        except ValueError as exc:
            raise RuntimeUnavailable(f"{self.base_url}{path}: malformed metrics") from exc


class EngineClient(_HttpClient):
    """One SGLang engine (or the simulator): the routes a control plane needs (SGLANG.md 2.2)."""

    def ready(self) -> bool:
        """``/ready``: 200 once warm-up is done; the cheap readiness check."""
        return self._ok("/ready")

    def ready_state(self) -> str:
        """``ready`` (200), ``unready`` (answers, not ready: loading) or ``down`` (no answer)."""
        try:
            return "ready" if self._get("/ready").status_code == 200 else "unready"
        except RuntimeUnavailable:
            return "down"

    def health(self) -> bool:
        """``/health``: may run a one-token generation on a real engine."""
        return self._ok("/health")

    def model_info(self) -> dict[str, Any]:
        return dict(self._json("/model_info"))

    def server_info(self) -> dict[str, Any]:
        return dict(self._json("/server_info"))

    def loads(self) -> dict[str, Any]:
        return dict(self._json("/v1/loads", include="core"))

    def metrics(self) -> MetricsSnapshot:
        return self._metrics()

    def release_memory(self) -> bool:
        """SGLang's ``/release_memory_occupation`` (with ``--enable-memory-saver``): weights and
        KV cache leave the GPU, the process stays. False when the engine refused (not idle)."""
        return self._post_ok("/release_memory_occupation")

    def resume_memory(self) -> bool:
        """SGLang's ``/resume_memory_occupation``: the weights back on the GPU, serving again.
        False when the engine refused (it was not released)."""
        return self._post_ok("/resume_memory_occupation")

    def load_lora_adapter(self, name: str, path: str, pinned: bool = False) -> str:
        """SGLang's ``/load_lora_adapter``: "" once loaded, else the engine's reason (a bad
        source, a full pool)."""
        body = {"lora_name": name, "lora_path": path, "pinned": pinned}
        return self._lora("/load_lora_adapter", body)

    def unload_lora_adapter(self, name: str) -> str:
        """SGLang's ``/unload_lora_adapter``: "" once unloaded, else the engine's reason."""
        return self._lora("/unload_lora_adapter", {"lora_name": name})

    def _lora(self, path: str, body: dict[str, Any]) -> str:
        try:
            response = self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise RuntimeUnavailable(f"{self.base_url}{path}: {type(exc).__name__}") from exc
        if response.status_code in (401, 403, 404):
            raise RuntimeUnavailable(f"{self.base_url}{path}: HTTP {response.status_code}")
        try:
            answer = response.json()
        except ValueError:
            answer = {}
        answer = answer if isinstance(answer, dict) else {}
        if response.status_code == 200 and answer.get("success", True) is not False:
            return ""
        why = answer.get("error_message") or answer.get("message") or response.text
        return str(why or f"HTTP {response.status_code}")[:500]

    def _post_ok(self, path: str) -> bool:
        try:
            response = self._http.post(path, json={})
        except httpx.HTTPError as exc:
            raise RuntimeUnavailable(f"{self.base_url}{path}: {type(exc).__name__}") from exc
        if response.status_code in (401, 403, 404):
            raise RuntimeUnavailable(f"{self.base_url}{path}: HTTP {response.status_code}")
        return response.status_code == 200

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        """Native ``/generate`` (one request, not streamed); the smg router serves it too."""
        try:
            response = self._http.post("/generate", json=body)
        except httpx.HTTPError as exc:
            raise RuntimeUnavailable(f"{self.base_url}/generate: {type(exc).__name__}") from exc
        if response.status_code != 200:
            raise RuntimeUnavailable(
                f"{self.base_url}/generate: HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            return dict(response.json())
        except ValueError as exc:
            raise RuntimeUnavailable(f"{self.base_url}/generate: not JSON") from exc


class RouterClient(_HttpClient):
    """The smg router: health, its worker list, and its metrics on a separate port."""

    def __init__(
        self,
        base_url: str,
        *,
        metrics_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_key: str = "",
    ) -> None:
        super().__init__(base_url, timeout=timeout, api_key=api_key)
        self.metrics_url = metrics_url

    def live(self) -> bool:
        return self._ok("/liveness")

    def ready(self) -> bool:
        """``/readiness``: 503 until at least one worker is healthy."""
        return self._ok("/readiness")

    def workers(self) -> list[dict[str, Any]]:
        return list(self._json("/workers").get("workers", []))

    def add_worker(self, url: str, **fields: Any) -> None:
        self._send("POST", "/workers", {"url": url, **fields})

    def remove_worker(self, worker_id: str) -> None:
        self._send("DELETE", f"/workers/{worker_id}", None)

    def loads(self) -> dict[str, Any]:
        return dict(self._json("/get_loads"))

    def metrics(self) -> MetricsSnapshot:
        if not self.metrics_url:
            raise RuntimeUnavailable("router metrics address unknown")
        with _HttpClient(self.metrics_url) as metrics:
            return metrics._metrics()

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> None:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise RuntimeUnavailable(f"{self.base_url}{path}: {type(exc).__name__}") from exc
        if response.status_code >= 300 and response.status_code != 404:
            raise RuntimeUnavailable(f"{method} {path}: HTTP {response.status_code}")
