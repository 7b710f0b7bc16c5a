"""What a tenant's kubeconfig may contain before the worker loads it.

A kubeconfig is code as much as data: ``users[].user.exec`` runs a command, ``auth-provider``
runs plugins, and file-path fields read the worker's own files. An organization's admin
supplies it, and the worker that loads it serves every organization, so only inline
credentials (``*-data`` fields, ``token``, basic auth) and https servers are accepted. Its
servers are addresses the worker will call, so they pass ``deployments.drivers.kube.egress`` (no
loopback, link-local, metadata or, unless allowed, private addresses), and ``proxy-url`` and
``insecure-skip-tls-verify`` are refused unless the operator allows them.
Pure (no ``kubernetes`` import), so the services can check a kubeconfig when it is attached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import yaml

from deployments.drivers.kube.egress import EgressPolicy, host_problem, resolved_problem

_FORBIDDEN_USER_FIELDS = frozenset(
    {"exec", "auth-provider", "client-certificate", "client-key", "tokenFile", "token-file"}
)
_FORBIDDEN_CLUSTER_FIELDS = frozenset({"certificate-authority"})
_DEFAULT_PORTS = {"https": 443, "http": 80}


@dataclass(frozen=True)
class KubeconfigPolicy:
    """What the operator allows beyond the safe default (settings ``PLINTH_KUBE_ALLOW_*``)."""

    allow_http: bool = False  # plain-http servers: API emulators in tests, kubectl proxy
    allow_insecure_tls: bool = False  # insecure-skip-tls-verify
    allow_proxy: bool = False  # proxy-url (http or https proxies; the proxy passes egress too)
    egress: EgressPolicy = field(default_factory=EgressPolicy)


def kubeconfig_policy() -> KubeconfigPolicy:
    """The policy the operator configured; read on every call so settings changes apply."""
    from django.conf import settings

    return KubeconfigPolicy(
        allow_http=settings.PLINTH_KUBE_ALLOW_HTTP,
        allow_insecure_tls=settings.PLINTH_KUBE_ALLOW_INSECURE_TLS,
        allow_proxy=settings.PLINTH_KUBE_ALLOW_PROXY,
        egress=EgressPolicy.build(
            allow_private=settings.PLINTH_KUBE_ALLOW_PRIVATE,
            allow=settings.PLINTH_KUBE_ALLOW_HOSTS,
        ),
    )


def kubeconfig_problems(
    text: str, policy: KubeconfigPolicy | None = None, *, resolve: bool = False
) -> list[str]:
    """Why this kubeconfig is refused (empty when it is acceptable). Never echoes its values.

    ``resolve`` also resolves every server's host name and checks each address it resolves to
    (when a cluster is saved). The worker checks again when it connects, on the addresses it
    actually connects to, so a name that resolves differently later still cannot get through.
    """
    policy = policy or KubeconfigPolicy()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return ["it is not valid YAML"]
    if not isinstance(data, dict):
        return ["it is not a kubeconfig mapping"]
    problems: list[str] = []
    for entry in _entries(data, "users"):
        user = entry.get("user") or {}
        for name in sorted(_FORBIDDEN_USER_FIELDS & set(user)):
            problems.append(f"users[].user.{name} is not allowed (use inline credentials)")
    for entry in _entries(data, "clusters"):
        cluster = entry.get("cluster") or {}
        problems.extend(_cluster_problems(cluster, policy, resolve=resolve))
    return list(dict.fromkeys(problems))  # several clusters with one fault: say it once


def _cluster_problems(
    cluster: dict[str, Any], policy: KubeconfigPolicy, *, resolve: bool
) -> list[str]:
    problems = [
        f"clusters[].cluster.{name} is not allowed (use {name}-data)"
        for name in sorted(_FORBIDDEN_CLUSTER_FIELDS & set(cluster))
    ]
    if cluster.get("insecure-skip-tls-verify") and not policy.allow_insecure_tls:
        problems.append(
            "clusters[].cluster.insecure-skip-tls-verify is not allowed "
            "(give the server's CA as certificate-authority-data)"
        )
    proxy = cluster.get("proxy-url")
    if proxy is not None and not policy.allow_proxy:
        problems.append("clusters[].cluster.proxy-url is not allowed on this installation")
    elif proxy is not None:
        problems.extend(_url_problems("proxy-url", proxy, {"http", "https"}, policy, resolve))
    schemes = {"https", "http"} if policy.allow_http else {"https"}
    # Through a proxy the proxy resolves the server: only what it names literally is checked.
    resolve_server = resolve and proxy is None
    problems.extend(_url_problems("server", cluster.get("server"), schemes, policy, resolve_server))
    return problems


def _url_problems(
    name: str, url: object, schemes: set[str], policy: KubeconfigPolicy, resolve: bool
) -> list[str]:
    where = f"clusters[].cluster.{name}"
    wanted = " or ".join(f"{s}://" for s in sorted(schemes, reverse=True))
    if not isinstance(url, str):
        return [f"{where} must be an {wanted} URL"]
    try:
        parsed = urlparse(url.strip())
        port = parsed.port or _DEFAULT_PORTS.get(parsed.scheme, 443)
    except ValueError:
        return [f"{where} is not a valid URL"]
    if parsed.scheme not in schemes:
        return [f"{where} must be an {wanted} URL"]
    problem = host_problem(parsed.hostname, policy.egress)
    if problem is None and resolve:
        problem = resolved_problem(parsed.hostname or "", port, policy.egress)
    return [f"{where}: the host {problem.removeprefix('the host ')}"] if problem else []


def _entries(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    entries = data.get(key) or []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
