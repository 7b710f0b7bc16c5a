"""The only module that imports ``kubernetes``: a small typed REST wrapper over the official client.

Objects are plain dicts in and out. Writes are server-side apply with field manager ``plinth``;
conflicts are forced only when the caller has checked the object carries Plinth's labels.
Every failure leaves this module as a ``KubeTemporaryError`` (429, 5xx, 409, timeouts, connection
errors: try again) or a ``KubePermanentError`` (400, 401, 403, 404 on a write, 422: a person must
act), so nothing above this module knows the client's exception types.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from deployments.drivers.errors import PermanentDriverError, TemporaryDriverError
from deployments.kubeconfig import kubeconfig_problems

log = logging.getLogger(__name__)

FIELD_MANAGER = "plinth"
TEMPORARY_STATUSES = frozenset({409, 429, 500, 502, 503, 504})


class KubeTemporaryError(TemporaryDriverError):
    """Rate limited, server trouble, a write conflict or no answer: retry with backoff."""


class KubePermanentError(PermanentDriverError):
    """Forbidden, invalid or unauthorised: retrying changes nothing."""


@dataclass(frozen=True)
class Kind:
    """Where a kind lives in the REST API."""

    api_version: str
    kind: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None, name: str | None = None) -> str:
        root = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        ns = f"/namespaces/{namespace}" if self.namespaced and namespace else ""
        return f"{root}{ns}/{self.plural}" + (f"/{name}" if name else "")


KINDS: dict[tuple[str, str], Kind] = {
    (k.api_version, k.kind): k
    for k in (
        Kind("v1", "Service", "services"),
        Kind("v1", "ServiceAccount", "serviceaccounts"),
        Kind("v1", "Secret", "secrets"),
        Kind("v1", "Pod", "pods"),
        Kind("v1", "Event", "events"),
        Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
        Kind("apps/v1", "Deployment", "deployments"),
        Kind("rbac.authorization.k8s.io/v1", "Role", "roles"),
        Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
        Kind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets"),
    )
}


def kind_of(api_version: str, kind: str) -> Kind:
    try:
        return KINDS[(api_version, kind)]
    except KeyError:
        raise KubePermanentError(f"Plinth does not manage {kind} ({api_version})") from None


class KubeClient:
    """One cluster. Build with ``for_host`` (tests, in-cluster proxies) or ``from_kubeconfig``."""

    def __init__(self, configuration: k8s.Configuration, *, timeout: float = 15.0) -> None:
        # Reconcile retries with backoff; urllib3 retrying underneath would hide errors and time.
        configuration.retries = 0
        self._api = k8s.ApiClient(configuration)
        self._timeout = timeout

    @classmethod
    def for_host(cls, host: str, *, timeout: float = 15.0) -> KubeClient:
        return cls(k8s.Configuration(host=host), timeout=timeout)

    @classmethod
    def from_kubeconfig(
        cls, text: str, *, context: str | None = None, allow_http: bool = False
    ) -> KubeClient:
        problems = kubeconfig_problems(text, allow_http=allow_http)
        if problems:
            raise KubePermanentError("the cluster's kubeconfig is refused: " + "; ".join(problems))
        configuration = k8s.Configuration()
        try:
            k8s_config.load_kube_config_from_dict(
                yaml.safe_load(text), context=context, client_configuration=configuration
            )
        except Exception as exc:  # malformed kubeconfig: never echo its content
            raise KubePermanentError(
                f"the cluster's kubeconfig is not usable: {type(exc).__name__}"
            ) from None
        return cls(configuration)

    def close(self) -> None:
        self._api.close()

    # --- reads ---

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", kind.path(namespace, name))
        except KubePermanentError as exc:
            if exc.status == 404:
                return None
            raise

    def list(
        self, kind: Kind, namespace: str, selector: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        query = {"labelSelector": _selector(selector)} if selector else {}
        items = self._call("GET", kind.path(namespace), query=query).get("items") or []
        # Filter again here: a server (or emulator) that ignores the selector must not make us
        # act on other people's objects.
        return [o for o in items if _matches(o, selector or {})]

    def pod_log(self, namespace: str, pod: str, *, container: str, tail: int) -> str:
        path = Kind("v1", "Pod", "pods").path(namespace, pod) + "/log"
        query = {"container": container, "tailLines": str(tail)}
        return str(self._call("GET", path, query=query, raw=True))

    # --- writes ---

    def apply(self, manifest: Mapping[str, Any], *, force: bool) -> dict[str, Any]:
        """Server-side apply ``manifest`` (create or update) as field manager ``plinth``."""
        kind = kind_of(manifest["apiVersion"], manifest["kind"])
        meta = manifest["metadata"]
        query = {"fieldManager": FIELD_MANAGER}
        if force:
            query["force"] = "true"
        headers = {"Content-Type": "application/apply-patch+yaml"}
        path = kind.path(meta.get("namespace"), meta["name"])
        return self._call("PATCH", path, query=query, body=dict(manifest), headers=headers)

    def delete(self, kind: Kind, namespace: str, name: str) -> bool:
        """Delete one object; True when it is gone, including when it was never there."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"}
        try:
            self._call("DELETE", kind.path(namespace, name), body=body)
        except KubePermanentError as exc:
            if exc.status != 404:
                raise
        return True

    # --- transport ---

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        raw: bool = False,
    ) -> Any:
        request = self._api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json", **(headers or {})},
            body=body,
        )
        try:
            response = self._api.call_api(*request, _request_timeout=self._timeout)
            response.read()
        except (Urllib3Error, OSError) as exc:
            raise KubeTemporaryError(
                f"Kubernetes API did not answer: {type(exc).__name__}"
            ) from exc
        except ApiException as exc:  # pragma: no cover - the REST layer returns, but be safe
            raise _error(exc.status or 0, exc.reason or "", exc.body or "") from exc
        status = response.status
        text = response.data.decode("utf-8", "replace") if response.data else ""
        if not 200 <= status < 300:
            raise _error(status, response.reason or "", text)
        if raw:
            return text
        return json.loads(text) if text else {}


def _error(status: int, reason: str, body: str) -> KubeTemporaryError | KubePermanentError:
    message = reason
    with contextlib.suppress(ValueError, AttributeError):
        message = json.loads(body).get("message") or reason
    text = f"Kubernetes API {status}: {message}"
    if status in TEMPORARY_STATUSES or status >= 500:
        return KubeTemporaryError(text, status=status)
    return KubePermanentError(text, status=status)


def _selector(selector: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _matches(obj: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())
