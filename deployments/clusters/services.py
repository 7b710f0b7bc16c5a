"""Where endpoints run: the built-in local cluster and an organization's Kubernetes clusters.

The only writers of clusters; admins only (reads are ``deployments.clusters.queries``'). A
Kubernetes cluster is reached with a kubeconfig stored as a write-only Secret, named here by id or
name.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from controlplane import audit
from controlplane.access import Actor, require_role
from controlplane.hygiene import full_pattern
from controlplane.models import Role, Secret
from controlplane.services import Conflict, ServiceError, reveal_secret
from deployments.cluster_settings import SettingsInvalid, parse_settings
from deployments.clusters.models import Cluster, ClusterKind
from deployments.clusters.queries import clusters_for, get_cluster
from deployments.drivers.kube.kubeconfig import kubeconfig_policy, kubeconfig_problems
from deployments.endpoints.models import SLUG_RE, Deployment, slug_validator
from deployments.endpoints.queries import id_or_name

_DNS_LABEL = full_pattern(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def default_cluster() -> Cluster:
    # The migration creates it; recreated here if a test flush or an operator removed it.
    shared = Cluster.objects.filter(organization=None, kind=ClusterKind.LOCAL)
    cluster = shared.first()
    if cluster is not None:
        return cluster
    try:
        # Two writers may both find it missing: the unique name makes the second wait for the
        # first's commit and then fail, in a savepoint, after which the first's row is visible.
        with transaction.atomic():
            return Cluster.objects.create(name="local", kind=ClusterKind.LOCAL, namespace="local")
    except IntegrityError:
        return shared.get()


def _kubeconfig_secret(actor: Actor, secret_id: uuid.UUID | str | None) -> Secret:
    secret = None
    if secret_id:
        secret = Secret.objects.filter(
            id_or_name(str(secret_id)), organization=actor.organization
        ).first()
    if secret is None:
        raise ServiceError(
            "name the secret that holds this cluster's kubeconfig (store it with POST "
            "/api/v1/secrets first)",
            field="kubeconfig_secret_id",
            code="not_found" if secret_id else "required",
        )
    # Resolved here as well as at connect time: a refusal is best said when the admin saves.
    problems = kubeconfig_problems(reveal_secret(secret), kubeconfig_policy(), resolve=True)
    if problems:
        raise ServiceError(
            f"secret {secret.name!r} is not an acceptable kubeconfig: " + "; ".join(problems),
            field="kubeconfig_secret_id",
            code="invalid_kubeconfig",
        )
    return secret


@transaction.atomic
def create_cluster(
    actor: Actor,
    *,
    name: str,
    kind: str = ClusterKind.KUBERNETES,
    namespace: str = "plinth",
    kubeconfig_secret_id: uuid.UUID | str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Cluster:
    """A Kubernetes cluster of the organization, reached with a kubeconfig stored as a Secret,
    with its operator settings (every default when None)."""
    require_role(actor, Role.ADMIN)
    if kind != ClusterKind.KUBERNETES:
        raise ServiceError(
            "only kubernetes clusters can be added; the local cluster is built in", field="kind"
        )
    if not isinstance(name, str) or not SLUG_RE.match(name):
        raise ServiceError(f"cluster name: {slug_validator.message}", field="name")
    _check_namespace(namespace)
    stored = checked_settings(settings)
    secret = _kubeconfig_secret(actor, kubeconfig_secret_id)
    if clusters_for(actor).filter(name=name).exists():
        raise Conflict(f"a cluster named {name!r} exists", field="name")
    cluster = Cluster.objects.create(
        organization=actor.organization,
        name=name,
        kind=ClusterKind.KUBERNETES,
        namespace=namespace,
        kubeconfig=secret,
        operator_settings=stored,
    )
    audit.record(
        actor,
        "cluster.create",
        cluster,
        after={
            "name": name,
            "namespace": namespace,
            "kubeconfig_secret": secret.name,
            "settings": stored,
        },
    )
    return cluster


def _check_namespace(namespace: str | None) -> None:
    if not isinstance(namespace, str) or not _DNS_LABEL.match(namespace):
        raise ServiceError(
            "namespace must be a DNS label: up to 63 lowercase letters, digits and hyphens",
            field="namespace",
        )


def checked_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """``settings`` validated, as stored (every field explicit, the GPU map complete); a
    ServiceError naming the first field at fault (``settings.<path>``) and counting the rest."""
    try:
        return parse_settings(settings).stored()
    except SettingsInvalid as exc:
        path, message = exc.problems[0]
        more = f" (and {len(exc.problems) - 1} more)" if len(exc.problems) > 1 else ""
        field = f"settings.{path}" if path else "settings"
        raise ServiceError(
            f"{field}: {message}{more}", field=field, code="invalid_settings"
        ) from None


@transaction.atomic
def update_cluster(
    actor: Actor,
    cluster_id: uuid.UUID | str,
    *,
    namespace: str | None = None,
    settings: Mapping[str, Any] | None = None,
) -> Cluster:
    """Change a Kubernetes cluster's namespace or its operator settings (replaced whole).

    Settings take effect at each endpoint's next reconcile pass (a changed manifest rolls its
    pods). The namespace cannot change under running endpoints: their objects would be left
    behind in the old one.
    """
    require_role(actor, Role.ADMIN)
    cluster = _own_cluster(actor, cluster_id)
    before = {"namespace": cluster.namespace, "settings": cluster.operator_settings}
    if namespace is not None and namespace != cluster.namespace:
        _check_namespace(namespace)
        if Deployment.objects.filter(cluster=cluster).exists():
            raise Conflict(
                "endpoints run in this cluster's namespace; delete them before changing it",
                field="namespace",
            )
        cluster.namespace = namespace
    if settings is not None:
        cluster.operator_settings = checked_settings(settings)
    cluster.save(update_fields=["namespace", "operator_settings"])
    after = {"namespace": cluster.namespace, "settings": cluster.operator_settings}
    if after != before:
        audit.record(actor, "cluster.update", cluster, before=before, after=after)
    return cluster


def _own_cluster(actor: Actor, cluster_id: uuid.UUID | str) -> Cluster:
    cluster = get_cluster(actor, cluster_id)
    if cluster.organization_id is None:
        raise Conflict("the built-in local cluster has no settings to change", code="built_in")
    return cluster


@transaction.atomic
def delete_cluster(actor: Actor, cluster_id: uuid.UUID | str) -> None:
    require_role(actor, Role.ADMIN)
    cluster = get_cluster(actor, cluster_id)
    if cluster.organization_id is None:
        raise Conflict("the built-in local cluster cannot be deleted", code="built_in")
    # Home to an endpoint, or one of the clusters it is placed on (``deployments.fleet``).
    in_use = (
        Deployment.objects.filter(Q(cluster=cluster) | Q(placements__cluster=cluster))
        .distinct()
        .count()
    )
    if in_use:
        raise Conflict(f"{in_use} endpoint(s) still run on this cluster; delete them first")
    audit.record(actor, "cluster.delete", cluster, before={"name": cluster.name})
    cluster.delete()
