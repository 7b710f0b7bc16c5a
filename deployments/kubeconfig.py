"""What a tenant's kubeconfig may contain before the worker loads it.

A kubeconfig is code as much as data: ``users[].user.exec`` runs a command, ``auth-provider``
runs plugins, and file-path fields read the worker's own files. An organization's admin
supplies it, and the worker that loads it serves every organization, so only inline
credentials (``*-data`` fields, ``token``, basic auth) and https servers are accepted.
Pure (no ``kubernetes`` import), so the services can check a kubeconfig when it is attached.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

import yaml

_FORBIDDEN_USER_FIELDS = frozenset(
    {"exec", "auth-provider", "client-certificate", "client-key", "tokenFile", "token-file"}
)
_FORBIDDEN_CLUSTER_FIELDS = frozenset({"certificate-authority"})


def kubeconfig_problems(text: str, *, allow_http: bool = False) -> list[str]:
    """Why this kubeconfig is refused (empty when it is acceptable). Never echoes its values.

    ``allow_http`` admits plain-http servers (settings.PLINTH_KUBE_ALLOW_HTTP: API emulators in
    tests, kubectl-proxy set-ups); never on by default.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return ["it is not valid YAML"]
    if not isinstance(data, dict):
        return ["it is not a kubeconfig mapping"]
    problems: list[str] = []
    for entry in _entries(data, "users"):
        user = entry.get("user") or {}
        for field in sorted(_FORBIDDEN_USER_FIELDS & set(user)):
            problems.append(f"users[].user.{field} is not allowed (use inline credentials)")
    for entry in _entries(data, "clusters"):
        cluster = entry.get("cluster") or {}
        for field in sorted(_FORBIDDEN_CLUSTER_FIELDS & set(cluster)):
            problems.append(f"clusters[].cluster.{field} is not allowed (use {field}-data)")
        server = cluster.get("server")
        schemes = {"https", "http"} if allow_http else {"https"}
        if not isinstance(server, str) or urlparse(server).scheme not in schemes:
            problems.append("clusters[].cluster.server must be an https:// URL")
    return problems


def _entries(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    entries = data.get(key) or []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
