"""The only module that imports ``kubernetes``: a small typed REST wrapper over the official client.

Objects are plain dicts in and out. Writes are server-side apply with field manager ``plinth``;
conflicts are forced only when the caller has checked the object carries Plinth's labels.
Every failure leaves this module as a ``KubeTemporaryError`` (429, 5xx, 409, timeouts, connection
errors: try again) or a ``KubePermanentError`` (400, 401, 403, 404 on a write, 422: a person must
act), so nothing above this module knows the client's exception types. Their messages are
built here from the status code alone: the body and reason phrase of a reply come from whatever
answered, which a tenant's kubeconfig chooses, and are never passed on to users or logs.
A client built from a kubeconfig opens sockets only to addresses ``deployments.drivers.kube.egress``
allows.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from deployments.drivers.errors import PermanentDriverError, TemporaryDriverError
from deployments.drivers.kube.egress import EgressPolicy, EgressRefused, guard_pool_manager
from deployments.drivers.kube.kubeconfig import KubeconfigPolicy, kubeconfig_problems

log = logging.getLogger(__name__)

FIELD_MANAGER = "plinth"
# The kubeconfig's bearer token (when it has one) goes with every call: the generated client
# sends it only for the auth settings a call names, and names none for raw calls like ours.
AUTH = ["BearerToken"]
TEMPORARY_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
# What a failure says, by status code: fixed text, never the reply's own words.
STATUS_SUMMARIES = {
    400: "the request was refused as malformed",
    401: "the cluster did not accept the kubeconfig's credentials",
    403: "the kubeconfig's credentials may not do this (forbidden)",
    404: "not found",
    405: "the method is not allowed",
    409: "a conflicting write happened at the same time",
    410: "gone",
    413: "the request was too large",
    415: "the media type is not supported",
    422: "the object was refused as invalid",
    429: "rate limited",
}


class KubeTemporaryError(TemporaryDriverError):
    """Rate limited, server trouble, a write conflict or no answer: retry with backoff."""


class KubePermanentError(PermanentDriverError):
    """Forbidden, invalid or unauthorised: retrying changes nothing."""


class KubeGone(KubeTemporaryError):
    """410 Gone: a watch asked to resume from a resourceVersion the server no longer keeps; list
    again and watch from the list's version."""


# What ``watch`` yields once the server has accepted the watch, before any event.
WATCH_OPEN = "OPEN"


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
        Kind("v1", "ConfigMap", "configmaps"),
        Kind("v1", "Pod", "pods"),
        Kind("v1", "Event", "events"),
        Kind("v1", "Node", "nodes", namespaced=False),
        Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
        Kind("apps/v1", "Deployment", "deployments"),
        Kind("apps/v1", "DaemonSet", "daemonsets"),
        Kind("batch/v1", "Job", "jobs"),
        Kind("rbac.authorization.k8s.io/v1", "Role", "roles"),
        Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings"),
        Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
        Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
        Kind("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "leaderworkersets"),
    )
}


def kind_of(api_version: str, kind: str) -> Kind:
    try:
        return KINDS[(api_version, kind)]
    except KeyError:
        raise KubePermanentError(f"Plinth does not manage {kind} ({api_version})") from None


_Objects = list[dict[str, Any]]  # ``list`` is a method's name inside KubeClient


class KubeClient:
    """One cluster. Build with ``for_host`` (tests, in-cluster proxies) or ``from_kubeconfig``."""

    def __init__(
        self,
        configuration: k8s.Configuration,
        *,
        timeout: float = 15.0,
        egress: EgressPolicy | None = None,
    ) -> None:
        """``egress``: the addresses a tenant-supplied configuration may reach; None only for a
        host the operator names (``for_host``)."""
        # Reconcile retries with backoff; urllib3 retrying underneath would hide errors and time.
        configuration.retries = 0
        self._api = k8s.ApiClient(configuration)
        self._timeout = timeout
        if egress is not None:
            try:
                guard_pool_manager(self._api.rest_client.pool_manager, egress)
            except EgressRefused as refused:
                self.close()
                raise _refused(refused) from None

    @classmethod
    def for_host(
        cls, host: str, *, timeout: float = 15.0, egress: EgressPolicy | None = None
    ) -> KubeClient:
        return cls(k8s.Configuration(host=host), timeout=timeout, egress=egress)

    @classmethod
    def from_kubeconfig(
        cls, text: str, *, context: str | None = None, policy: KubeconfigPolicy | None = None
    ) -> KubeClient:
        """A client for a tenant's kubeconfig: checked again here (it may have changed since it
        was saved), and every connection it opens is checked against ``policy.egress``."""
        policy = policy or KubeconfigPolicy()
        # No resolving here: the guarded connections resolve and check on every connect, and a
        # DNS hiccup there is a temporary error rather than a refusal.
        problems = kubeconfig_problems(text, policy)
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
        return cls(configuration, egress=policy.egress)

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

    def list_versioned(
        self,
        kind: Kind,
        namespace: str | None,
        selector: Mapping[str, str] | None = None,
        fields: str | None = None,
    ) -> tuple[_Objects, str]:
        """Every object of ``kind`` in ``namespace`` (None: all) matching the label ``selector``
        and ``fields`` selector, and the list's resourceVersion, which a watch resumes from."""
        query = {"labelSelector": _selector(selector)} if selector else {}
        if fields:
            query["fieldSelector"] = fields
        reply = self._call("GET", kind.path(namespace), query=query)
        items = [o for o in reply.get("items") or [] if _matches(o, selector or {})]
        return items, str((reply.get("metadata") or {}).get("resourceVersion") or "")

    def watch(
        self,
        kind: Kind,
        namespace: str | None,
        resource_version: str,
        *,
        selector: Mapping[str, str] | None = None,
        fields: str | None = None,
        timeout_s: int = 300,
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, object) of every change after ``resource_version``, until the server ends the
        watch (after ``timeout_s``). ``(WATCH_OPEN, {})`` comes first, once the server accepted
        it. A version the server no longer keeps raises ``KubeGone`` (as an HTTP 410 or as an
        ERROR event, both of which servers send)."""
        query = {"watch": "true", "resourceVersion": resource_version}
        query["timeoutSeconds"] = str(timeout_s)
        query["allowWatchBookmarks"] = "true"
        if selector:
            query["labelSelector"] = _selector(selector)
        if fields:
            query["fieldSelector"] = fields
        request = self._api.param_serialize(
            "GET",
            kind.path(namespace),
            query_params=list(query.items()),
            header_params={"Accept": "application/json"},
            auth_settings=AUTH,
        )
        # The read timeout outlasts the server's own end of the watch.
        timeout = (self._timeout, timeout_s + self._timeout)
        try:
            response = self._api.call_api(*request, _request_timeout=timeout)
        except EgressRefused as refused:
            raise _refused(refused) from None
        except (Urllib3Error, OSError):
            raise KubeTemporaryError("Kubernetes API did not answer") from None
        raw = response.response
        try:
            if response.status == 410:
                raise KubeGone("Kubernetes API 410: gone", status=410)
            if not 200 <= response.status < 300:
                raise _error(response.status)
            yield WATCH_OPEN, {}
            pending = b""
            try:
                for chunk in raw.stream(65536, decode_content=True):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        if line.strip():
                            yield _watch_event(line)
            except (Urllib3Error, OSError):
                raise KubeTemporaryError("Kubernetes API watch broke off") from None
            if pending.strip():
                yield _watch_event(pending)
        finally:
            raw.release_conn()

    def gpu_nodes_and_pods(self) -> tuple[_Objects, _Objects]:
        """Every Node, and every pod of every namespace that is not finished (what holds GPUs):
        two LISTs, for the cluster's GPU inventory. Needs cluster-wide list on both."""
        nodes = self._call("GET", kind_of("v1", "Node").path(None)).get("items") or []
        active = {"fieldSelector": "status.phase!=Succeeded,status.phase!=Failed"}
        pods = self._call("GET", kind_of("v1", "Pod").path(None), query=active).get("items")
        return nodes, pods or []

    def pod_log(
        self,
        namespace: str,
        pod: str,
        *,
        container: str,
        tail: int | None = None,
        since: datetime | None = None,
        previous: bool = False,
        timestamps: bool = False,
        limit_bytes: int | None = None,
    ) -> str:
        """A container's log (what ``read_namespaced_pod_log`` asks): its last ``tail`` lines,
        those since ``since`` (whole seconds: the API's precision), the previous run's
        (``previous``: a restarted container, e.g. in CrashLoopBackOff), each line prefixed by
        its RFC 3339 time and a space (``timestamps``), at most ``limit_bytes`` bytes."""
        path = Kind("v1", "Pod", "pods").path(namespace, pod) + "/log"
        query = {"container": container}
        if tail is not None:
            query["tailLines"] = str(tail)
        if since is not None:
            query["sinceTime"] = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if previous:
            query["previous"] = "true"
        if timestamps:
            query["timestamps"] = "true"
        if limit_bytes is not None:
            query["limitBytes"] = str(limit_bytes)
        return self._send("GET", path, query=query)

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

    def annotate(
        self, kind: Kind, namespace: str, name: str, annotations: Mapping[str, str]
    ) -> dict[str, Any]:
        """Set ``annotations`` on one object (a JSON merge patch: the rest is left as it is)."""
        body = {"metadata": {"annotations": dict(annotations)}}
        headers = {"Content-Type": "application/merge-patch+json"}
        return self._call("PATCH", kind.path(namespace, name), body=body, headers=headers)

    def delete(
        self, kind: Kind, namespace: str, name: str, *, propagation: str = "Foreground"
    ) -> bool:
        """Delete one object; True when it is gone, including when it was never there.
        ``Foreground``: the object stays until what it owns is gone; ``Background``: it goes
        now, and the garbage collector takes what it owned."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
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
    ) -> dict[str, Any]:
        """One API call whose reply is a Kubernetes object."""
        return _json_object(self._send(method, path, query=query, body=body, headers=headers))

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> str:
        """One API call; the reply's text."""
        request = self._api.param_serialize(
            method,
            path,
            query_params=list((query or {}).items()),
            header_params={"Accept": "application/json", **(headers or {})},
            body=body,
            auth_settings=AUTH,
        )
        # ``from None`` throughout: the exceptions underneath carry what the other end sent
        # (a reply body, a garbled status line), and a chained traceback would log it.
        try:
            response = self._api.call_api(*request, _request_timeout=self._timeout)
            response.read()
        except EgressRefused as refused:
            raise _refused(refused) from None
        except (Urllib3Error, OSError):
            raise KubeTemporaryError("Kubernetes API did not answer") from None
        except ApiException as exc:  # pragma: no cover - the REST layer returns, but be safe
            raise _error(exc.status or 0) from None
        status = response.status
        if not 200 <= status < 300:
            raise _error(status)
        return response.data.decode("utf-8", "replace") if response.data else ""


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise KubePermanentError("Kubernetes API: the reply is not a Kubernetes object")
    return data


def _watch_event(line: bytes) -> tuple[str, dict[str, Any]]:
    """One watch line as (type, object); ERROR events become exceptions (410: ``KubeGone``)."""
    event = _json_object(line.decode("utf-8", "replace"))
    kind, obj = str(event.get("type") or ""), event.get("object")
    if not isinstance(obj, dict):
        raise KubePermanentError("Kubernetes API: a watch event without an object")
    if kind == "ERROR":
        code = int(obj.get("code") or 0)
        if code == 410:
            raise KubeGone("Kubernetes API 410: gone", status=410)
        raise _error(code)
    return kind, obj


def _error(status: int) -> KubeTemporaryError | KubePermanentError:
    """The error for a reply with ``status``: a fixed summary, whatever the reply said."""
    if status >= 500:
        summary = "the API server failed"
    else:
        summary = STATUS_SUMMARIES.get(status, "an unexpected reply")
    text = f"Kubernetes API {status}: {summary}"
    if status in TEMPORARY_STATUSES or status >= 500:
        return KubeTemporaryError(text, status=status)
    return KubePermanentError(text, status=status)


def _refused(refused: EgressRefused) -> KubePermanentError:
    return KubePermanentError(f"the cluster's API server address is refused: {refused.message}")


def _selector(selector: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def _matches(obj: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())
