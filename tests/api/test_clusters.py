"""/api/v1/clusters: the shared local cluster and an organization's Kubernetes clusters."""

from __future__ import annotations

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
