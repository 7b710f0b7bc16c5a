"""What the worker's ServiceAccount may do, by the real authorizer (SubjectAccessReviews against
the chart's managed-namespace Role and GPU-inventory ClusterRole, as
``--authorization-mode=Node,RBAC`` decides): everything an endpoint's life needs in a namespace
it deploys into (the lifecycle tests run with its token), and none of what it does not need
elsewhere. The chart's other accounts: test_chart_on_real_cluster.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.kube_real.conftest import PLATFORM_NAMESPACE, WORKER_ACCOUNT, Admin

HERE = "{ns}"  # the namespace the worker deploys into
# (verb, group, resource, namespace or None for cluster-wide)
ALLOWED = [
    ("patch", "apps", "deployments", HERE),
    ("patch", "leaderworkerset.x-k8s.io", "leaderworkersets", HERE),  # multi-node replicas
    ("delete", "apps", "deployments", HERE),
    ("watch", "", "services", HERE),
    ("create", "", "secrets", HERE),
    ("create", "rbac.authorization.k8s.io", "roles", HERE),
    ("get", "", "pods/log", HERE),
    ("patch", "", "pods", HERE),  # a warm pool's annotations (deployments/drivers/kube/warm.py)
    ("watch", "batch", "jobs", HERE),
    ("watch", "", "nodes", None),
    ("list", "", "pods", None),
]
DENIED = [
    ("get", "", "secrets", "kube-system"),  # another namespace's Secrets
    ("list", "", "secrets", None),  # every namespace's
    ("create", "apps", "deployments", "kube-system"),
    ("create", "", "pods", HERE),  # pods come from its workloads' controllers only
    ("create", "apps", "statefulsets", HERE),  # LWS makes a group's, not the worker
    ("create", "", "pods/exec", HERE),
    ("get", "", "pods/proxy", HERE),  # it reaches engines through their annotations, never so
    ("delete", "", "pods", HERE),
    ("update", "", "nodes", None),
    ("get", "", "nodes", None),  # the inventory lists them; nothing reads one by name
    ("create", "rbac.authorization.k8s.io", "clusterroles", None),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", None),
    ("escalate", "rbac.authorization.k8s.io", "roles", HERE),
    ("bind", "rbac.authorization.k8s.io", "clusterroles", None),
    ("create", "", "namespaces", None),
    ("delete", "", "namespaces", None),
    ("create", "", "serviceaccounts/token", HERE),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", None),
]


def may(
    admin: Admin,
    account: tuple[str, str],
    verb: str,
    group: str,
    resource: str,
    namespace: str | None,
) -> bool:
    """Whether the ServiceAccount ``account`` (namespace, name) may, by a SubjectAccessReview
    with the groups its token carries (``namespace`` None: cluster-wide)."""
    home, name = account
    kind, _, sub = resource.partition("/")
    attributes: dict[str, Any] = {"verb": verb, "group": group, "resource": kind}
    if sub:
        attributes["subresource"] = sub
    if namespace is not None:
        attributes["namespace"] = namespace
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{home}:{name}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{home}",
                "system:authenticated",
            ],
            "resourceAttributes": attributes,
        },
    }
    reply = admin.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(reply["status"].get("allowed"))


def allowed(
    admin: Admin, namespace: str, verb: str, group: str, resource: str, where: str | None
) -> bool:
    where = where.format(ns=namespace) if where is not None else None
    return may(admin, (PLATFORM_NAMESPACE, WORKER_ACCOUNT), verb, group, resource, where)


@pytest.mark.usefixtures("worker_kubeconfig")  # grants the worker its Role in ``namespace``
def test_the_worker_may_do_what_it_needs_and_nothing_else(admin: Admin, namespace: str) -> None:
    refused = [a for a in ALLOWED if not allowed(admin, namespace, *a)]
    granted = [d for d in DENIED if allowed(admin, namespace, *d)]
    assert not refused, f"the worker needs {refused}"
    assert not granted, f"the worker should not have {granted}"
