"""What every object of an endpoint carries: its metadata, the operator's extra labels and
annotations, the hash that keeps an unchanged object from being re-applied, and the two Secrets
(model hub token, API key) with the environment entries that read them."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from deployments.cluster_settings import ClusterSettings
from deployments.drivers.base import HF_TOKEN_ENV, DeploymentRef, RevisionPlan
from deployments.drivers.kube import labels as L
from runtime.secret_flags import API_KEY_ENV

HF_TOKEN_KEY = HF_TOKEN_ENV  # the Secret's key, named as the variable it becomes


def object_meta(ref: DeploymentRef, revision: RevisionPlan, name: str, role: str) -> dict[str, Any]:
    """The metadata of ``ref``'s object ``name``: its namespace and Plinth's labels for ``role``."""
    return {
        "name": name,
        "namespace": ref.namespace,
        "labels": L.object_labels(ref.slug, ref.id, revision.number, role),
    }


def with_operator_metadata(obj: dict[str, Any], cluster: ClusterSettings) -> dict[str, Any]:
    """``obj`` with the operator's extra labels and annotations on it and on its pod templates.

    Plinth's own keys win (the settings refuse its prefixes anyway): selectors and ownership
    rest on them. Selectors themselves are never touched, so changing these rolls pods but
    never orphans a workload.
    """
    if not cluster.labels and not cluster.annotations:
        return obj
    for meta in (obj["metadata"], *(t["metadata"] for t in _pod_templates(obj))):
        meta["labels"] = {**cluster.labels, **meta.get("labels", {})}
        if cluster.annotations:
            meta["annotations"] = {**cluster.annotations, **meta.get("annotations", {})}
    return obj


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj.get("spec") or {}
    if "template" in spec:
        return [spec["template"]]
    group = spec.get("leaderWorkerTemplate") or {}
    return [group[k] for k in ("leaderTemplate", "workerTemplate") if k in group]


def with_config_hash(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` annotated with a hash of its content, so an unchanged object is never re-applied."""
    digest = hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:32]
    meta = obj["metadata"]
    meta["annotations"] = {**meta.get("annotations", {}), L.CONFIG_HASH: digest}
    return obj


def hf_token_secret(ref: DeploymentRef, revision: RevisionPlan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(ref, revision, L.object_name(ref.slug, "hf-token"), "engine"),
        "type": "Opaque",
        "stringData": {HF_TOKEN_KEY: revision.hf_token or ""},
    }


def hf_token_env(ref: DeploymentRef) -> dict[str, Any]:
    secret = {"name": L.object_name(ref.slug, "hf-token"), "key": HF_TOKEN_KEY}
    return {"name": HF_TOKEN_KEY, "valueFrom": {"secretKeyRef": secret}}


def api_key_secret(ref: DeploymentRef, revision: RevisionPlan) -> dict[str, Any]:
    """The key engines and the router demand of every caller but probes (SGLANG.md 2.1)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": object_meta(ref, revision, L.object_name(ref.slug, "api-key"), "router"),
        "type": "Opaque",
        "stringData": {API_KEY_ENV: ref.api_key},
    }


def api_key_env(ref: DeploymentRef) -> list[dict[str, Any]]:
    if not ref.api_key:
        return []
    secret = {"secretKeyRef": {"name": L.object_name(ref.slug, "api-key"), "key": API_KEY_ENV}}
    return [{"name": API_KEY_ENV, "valueFrom": secret}]


def _pod_annotations(ref: DeploymentRef) -> dict[str, str]:
    """A digest of the API key on the pod template: the key reaches a container only when it
    starts, so a new key (a rotated PLINTH_ENCRYPTION_KEY) must roll the pods."""
    if not ref.api_key:
        return {}
    return {L.API_KEY_DIGEST: hashlib.sha256(ref.api_key.encode()).hexdigest()[:16]}


def template_meta(ref: DeploymentRef, labels: dict[str, str]) -> dict[str, Any]:
    """A pod template's metadata: ``labels``, and what rolls its pods when the key changes."""
    annotations = _pod_annotations(ref)
    return {"labels": labels, "annotations": annotations} if annotations else {"labels": labels}
