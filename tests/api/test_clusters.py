"""/api/v1/clusters: the shared local cluster and an organization's Kubernetes clusters."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction

from deployments.models import Cluster
from tests.api.conftest import SPEC, Clients, error_of, fields_of

CLUSTER = {"name": "gpu-east", "namespace": "inference", "kubeconfig_secret_id": "kubeconfig"}


def _kubeconfig(api: Clients) -> None:
    api.alice.post("secrets", {"name": "kubeconfig", "value": "apiVersion: v1\nkind: Config\n"})


def test_the_local_cluster_is_there_for_everyone(api: Clients) -> None:
    [local] = api.carol.get("clusters").json()
    assert local["kind"] == "local" and local["shared"] is True
    assert api.bob.get(f"clusters/{local['id']}").json()["name"] == "local"
    refused = api.alice.delete(f"clusters/{local['id']}")
    assert refused.status_code == 409 and error_of(refused)["code"] == "built_in"


def test_a_shared_cluster_name_is_unique_too(api: Clients) -> None:
    # No organization is NULL, and NULLs compare equal in this constraint: one shared "local".
    shared = Cluster.objects.get(organization=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        Cluster.objects.create(name=shared.name, kind="local", namespace="local")


def test_an_admin_adds_a_kubernetes_cluster_and_endpoints_can_use_it(api: Clients) -> None:
    _kubeconfig(api)
    response = api.alice.post("clusters", CLUSTER)
    assert response.status_code == 201, response.content
    cluster = response.json()
    assert cluster["kind"] == "kubernetes" and cluster["shared"] is False
    created = api.dave.post(
        "deployments", {"slug": "chat", "spec": SPEC, "cluster_id": cluster["id"]}
    )
    assert created.json()["cluster"]["name"] == "gpu-east"
    in_use = api.alice.delete(f"clusters/{cluster['id']}")
    assert in_use.status_code == 409
    assert api.bob.get(f"clusters/{cluster['id']}").status_code == 404
    foreign = api.bob.post("deployments", {"slug": "x", "spec": SPEC, "cluster_id": cluster["id"]})
    assert fields_of(foreign) == ["cluster_id"]


def test_cluster_refusals(api: Clients) -> None:
    assert api.dave.post("clusters", CLUSTER).status_code == 403
    assert fields_of(api.alice.post("clusters", CLUSTER)) == ["kubeconfig_secret_id"]
    _kubeconfig(api)
    assert fields_of(api.alice.post("clusters", {**CLUSTER, "name": "GPU"})) == ["name"]
    assert fields_of(api.alice.post("clusters", {**CLUSTER, "namespace": "a_b"})) == ["namespace"]
    assert fields_of(api.alice.post("clusters", {**CLUSTER, "kind": "local"})) == ["kind"]
    assert api.alice.post("clusters", CLUSTER).status_code == 201
    assert api.alice.post("clusters", CLUSTER).status_code == 409


def test_removing_an_unused_cluster(api: Clients) -> None:
    _kubeconfig(api)
    cluster_id = api.alice.post("clusters", CLUSTER).json()["id"]
    assert api.bob.delete(f"clusters/{cluster_id}").status_code == 404
    assert api.dave.delete(f"clusters/{cluster_id}").status_code == 403
    assert api.alice.delete(f"clusters/{cluster_id}").status_code == 204
    assert len(api.alice.get("clusters").json()) == 1


def test_a_kubeconfig_that_would_run_commands_or_read_files_is_refused(api: Clients) -> None:
    hostile = (
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'http://10.0.0.1',"
        " certificate-authority: /etc/x}}]\n"
        "users: [{name: u, user: {exec: {command: sh, args: [-c, 'id']}}}]\n"
    )
    api.alice.post("secrets", {"name": "kubeconfig", "value": hostile})
    refused = api.alice.post("clusters", CLUSTER)
    assert fields_of(refused) == ["kubeconfig_secret_id"]
    message = error_of(refused)["message"]
    assert "users[].user.exec is not allowed" in message
    assert "certificate-authority is not allowed" in message
    assert "must be an https:// URL" in message
    assert "'id'" not in message  # the kubeconfig's values are never echoed


def test_a_secret_in_use_by_a_cluster_cannot_be_deleted(api: Clients) -> None:
    _kubeconfig(api)
    api.alice.post("clusters", CLUSTER)
    [secret] = api.alice.get("secrets").json()
    refused = api.alice.delete(f"secrets/{secret['id']}")
    assert refused.status_code == 409
    assert "in use" in error_of(refused)["message"]


def _kubeconfig_for(server: str, **cluster: str) -> str:
    extra = "".join(f", {k}: {v}" for k, v in cluster.items())
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'{extra}}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )


def _attach(api: Clients, server: str, **cluster: str) -> Any:
    api.alice.post("secrets", {"name": "kubeconfig", "value": _kubeconfig_for(server, **cluster)})
    return api.alice.post("clusters", CLUSTER)


@pytest.mark.parametrize(
    "server",
    [
        "https://127.0.0.1:6443",
        "https://[::1]:6443",
        "https://localhost:6443",
        "https://169.254.169.254",
        "https://metadata.google.internal",
        "https://[fd00:ec2::254]",
        "https://10.0.0.1:6443",
        "https://[fe80::1]:6443",
        "https://[::ffff:127.0.0.1]:6443",
        "https://2130706433:6443",
        "https://0177.0.0.1:6443",
        "https://0.0.0.0:6443",
        "https://k8s.invalid:6443",  # resolved when saved: a name that resolves nowhere
    ],
)
def test_an_api_server_the_worker_must_not_call_is_refused(api: Clients, server: str) -> None:
    refused = _attach(api, server)
    assert refused.status_code == 422
    assert fields_of(refused) == ["kubeconfig_secret_id"]
    message = error_of(refused)["message"]
    assert "clusters[].cluster.server: the host" in message
    host = server.removeprefix("https://").rsplit(":", 1)[0].strip("[]")
    assert host not in message  # the kubeconfig's values are never echoed


def test_proxies_and_unverified_tls_are_refused_unless_the_operator_allows_them(
    api: Clients, settings: Any
) -> None:
    insecure = {"insecure-skip-tls-verify": "true"}
    refused = _attach(api, "https://8.8.8.8", **insecure)
    assert fields_of(refused) == ["kubeconfig_secret_id"]
    assert "insecure-skip-tls-verify is not allowed" in error_of(refused)["message"]
    proxied = {"proxy-url": "'http://8.8.4.4:3128'"}
    refused = _attach(api, "https://8.8.8.8", **proxied)
    assert "proxy-url is not allowed" in error_of(refused)["message"]
    settings.PLINTH_KUBE_ALLOW_PROXY = True
    settings.PLINTH_KUBE_ALLOW_INSECURE_TLS = True
    assert _attach(api, "https://8.8.8.8", **insecure, **proxied).status_code == 201


def test_the_operator_may_allow_private_ranges_and_named_hosts(api: Clients, settings: Any) -> None:
    settings.PLINTH_KUBE_ALLOW_PRIVATE = True
    refused = _attach(api, "https://127.0.0.1:6443")  # loopback stays refused
    assert fields_of(refused) == ["kubeconfig_secret_id"]
    private = _attach(api, "https://10.0.0.1:6443")
    assert private.status_code == 201
    settings.PLINTH_KUBE_ALLOW_HOSTS = ["127.0.0.1"]
    assert api.alice.delete(f"clusters/{private.json()['id']}").status_code == 204
    assert _attach(api, "https://127.0.0.1:6443").status_code == 201
