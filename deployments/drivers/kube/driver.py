"""The Kubernetes driver: apply rendered manifests, observe pods, delete what the endpoint owns.

Apply reads each object first: one that exists without Plinth's labels for this endpoint is
refused (``ForeignObjectError``) and never written; one whose config hash matches is left alone
(no write at all); the rest are server-side applied, forcing field conflicts only on objects
already known to be ours. Kinds the new revision no longer renders (a role removed, a Deployment
that became a LeaderWorkerSet) are deleted. Rolling out and rolling back are Kubernetes' own
rolling update: applying the previous revision again is the rollback.
"""

from __future__ import annotations

import logging
from typing import Any

from deployments.drivers import base
from deployments.drivers.errors import ForeignObjectError
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import Kind, KubeClient, KubePermanentError, kind_of
from deployments.drivers.kube.observe import observation
from deployments.drivers.kube.render import KubeOptions, render_revision, router_url
from runtime.launch import ROUTER_PORT

log = logging.getLogger(__name__)

# What apply may create, in the order delete removes them (workloads first).
OWNED_KINDS = [
    ("apps/v1", "Deployment"),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("v1", "Service"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "ServiceAccount"),
    ("v1", "Secret"),
]
WORKLOAD_KINDS = OWNED_KINDS[:2]


class KubeDriver:
    def __init__(
        self, client: KubeClient, options: KubeOptions | None = None, *, has_lws: bool = True
    ) -> None:
        self.client = client
        self.options = options or KubeOptions()
        # Clusters without the LWS CRD answer 404 on its list: treat as "none there".
        self.has_lws = has_lws

    def close(self) -> None:
        self.client.close()

    # --- apply ---

    def apply(self, ref: base.DeploymentRef, revision: base.RevisionPlan) -> None:
        manifests = render_revision(ref, revision, self.options)
        for manifest in manifests:
            self._apply_one(ref, manifest)
        # Pruned on every pass, not only after a change: a worker that died between applying
        # and pruning must not leave an old object behind for good.
        wanted = {(m["apiVersion"], m["kind"], m["metadata"]["name"]) for m in manifests}
        self._prune(ref, wanted)

    def _apply_one(self, ref: base.DeploymentRef, manifest: dict[str, Any]) -> bool:
        """Apply one object unless it is already as rendered; True when it was written."""
        kind = kind_of(manifest["apiVersion"], manifest["kind"])
        name = manifest["metadata"]["name"]
        current = self.client.get(kind, ref.namespace, name)
        if current is not None and not L.is_ours(current, ref.id):
            raise ForeignObjectError(
                f"{manifest['kind']} {ref.namespace}/{name} exists and is not managed by Plinth "
                "for this endpoint; rename the endpoint or remove that object"
            )
        if current is not None and _config_hash(current) == _config_hash(manifest):
            return False
        try:
            self.client.apply(manifest, force=current is not None)
        except KubePermanentError as exc:
            if exc.status == 404 and manifest["kind"] == "LeaderWorkerSet":
                raise KubePermanentError(
                    "a replica of this endpoint spans several nodes, which needs LeaderWorkerSet "
                    "(https://github.com/kubernetes-sigs/lws) installed on the cluster",
                    status=404,
                ) from exc
            raise
        return True

    def _owned(
        self, ref: base.DeploymentRef, kinds: list[tuple[str, str]]
    ) -> list[tuple[Kind, dict[str, Any]]]:
        """(kind, object) of this endpoint's objects; list items carry no apiVersion/kind."""
        found: list[tuple[Kind, dict[str, Any]]] = []
        for api_version, kind_name in kinds:
            if kind_name == "LeaderWorkerSet" and not self.has_lws:
                continue
            kind = kind_of(api_version, kind_name)
            try:
                objs = self.client.list(kind, ref.namespace, L.owner_selector(ref.id))
            except KubePermanentError as exc:
                if exc.status == 404 and kind_name == "LeaderWorkerSet":
                    continue  # the LWS CRD is not installed: there are none
                raise
            found += [(kind, o) for o in objs if L.is_ours(o, ref.id)]
        return found

    def _prune(self, ref: base.DeploymentRef, wanted: set[tuple[str, str, str]]) -> None:
        for kind, obj in self._owned(ref, OWNED_KINDS):
            if (kind.api_version, kind.kind, obj["metadata"]["name"]) not in wanted:
                self.client.delete(kind, ref.namespace, obj["metadata"]["name"])

    # --- observe ---

    def observe(self, ref: base.DeploymentRef) -> base.Observation:
        pods = self.client.list(kind_of("v1", "Pod"), ref.namespace, L.owner_selector(ref.id))
        events = self.client.list(kind_of("v1", "Event"), ref.namespace) if pods else []
        return observation(pods, events, router_url(ref, ROUTER_PORT))

    # --- stop / delete ---

    def stop(self, ref: base.DeploymentRef) -> bool:
        return self._delete_kinds(ref, WORKLOAD_KINDS)

    def delete(self, ref: base.DeploymentRef) -> bool:
        return self._delete_kinds(ref, OWNED_KINDS)

    def _delete_kinds(self, ref: base.DeploymentRef, kinds: list[tuple[str, str]]) -> bool:
        for kind, obj in self._owned(ref, kinds):
            if not obj["metadata"].get("deletionTimestamp"):
                self.client.delete(kind, ref.namespace, obj["metadata"]["name"])
        # Gone once no owned object and no pod is left (pods go after their workloads).
        pods = self.client.list(kind_of("v1", "Pod"), ref.namespace, L.owner_selector(ref.id))
        return not self._owned(ref, kinds) and not pods

    # --- logs ---

    def logs(
        self, ref: base.DeploymentRef, replica: str | None = None, tail: int = 200
    ) -> base.LogLines:
        pods = self.client.list(kind_of("v1", "Pod"), ref.namespace, L.owner_selector(ref.id))
        names = sorted(p["metadata"]["name"] for p in pods)
        name = replica if replica in names else (names[0] if names else None)
        if name is None:
            return base.LogLines(replica="")
        pod = next(p for p in pods if p["metadata"]["name"] == name)
        container = "router" if pod["metadata"]["labels"].get(L.ROLE) == "router" else "engine"
        text = self.client.pod_log(ref.namespace, name, container=container, tail=tail)
        lines = [base.redact_log_line(line) for line in text.splitlines()[-tail:]]
        return base.LogLines(replica=name, lines=lines, replicas=tuple(names))


def _config_hash(obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(L.CONFIG_HASH)
