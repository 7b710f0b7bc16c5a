"""A canary on a Kubernetes cluster (the API emulator): its own Deployments, router pool and
Service, labelled with the endpoint's id plus the revision, so neither pool's apply or prune
touches the other's objects; the gateway is given the canary's router Service; abort removes
the canary's objects and leaves the endpoint's.

The emulator runs no controllers: the test writes the pods a Deployment would have (as in
``tests/endpoints/test_reconcile_kube.py``).

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): the test makes each pool's pods
ready itself, so the canary serves the moment it is applied and the gateway's route and the abort
are checked without waiting on controllers. Not a misbehaviour: a canary on the real controllers is
not in tests/kube_real yet and would replace this.
"""

from __future__ import annotations

import pytest

from deployments.drivers.kube import labels as L
from deployments.endpoints import reconcile
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import Canary, CanaryStatus
from deployments.status import ACTIVE
from tests.conftest import Cast
from tests.drivers.kube_emulator import RunningEmulator
from tests.endpoints.test_reconcile_kube import running
from tests.experiments.canary.helpers import fp8
from tests.fixtures.endpoints import NS, refresh


def put_pod(
    cluster: RunningEmulator, slug: str, owner: str, revision: int, name: str, role: str
) -> None:
    labels = L.object_labels(slug, owner, revision, role)
    container = {"name": role, "image": "x", "ports": [{"containerPort": 30000}]}
    pod = {"metadata": {"name": name, "namespace": NS, "labels": labels},
           "spec": {"containers": [container]}, "status": running(True, role=role)}  # fmt: skip
    cluster.put("v1", "Pod", NS, pod)


def step(deployment: Deployment) -> Deployment:
    reconcile.reconcile(str(deployment.pk))
    return refresh(deployment)


@pytest.mark.django_db
def test_a_canary_runs_as_its_own_pool_beside_the_endpoints(
    cast: Cast,
    kube_endpoint: Deployment,
    emulator: RunningEmulator,
) -> None:
    owner = str(kube_endpoint.pk)
    step(kube_endpoint)
    put_pod(emulator, "kchat", owner, 1, "kchat-engine-1", "engine")
    put_pod(emulator, "kchat", owner, 1, "kchat-router-1", "router")
    deployment = step(kube_endpoint)
    assert deployment.status == ACTIVE

    actor = cast.actor(cast.alice, cast.acme)
    canary_services.start_canary(actor, deployment.pk, spec=fp8(), weight=20)
    step(deployment)
    engines = emulator.get("apps/v1", "Deployment", NS, "kchat-r2-engine")
    router = emulator.get("apps/v1", "Deployment", NS, "kchat-r2-router")
    service = emulator.get("v1", "Service", NS, "kchat-r2-router")
    assert engines is not None and router is not None and service is not None
    labels = engines["metadata"]["labels"]
    assert labels[L.DEPLOYMENT] == f"{owner}-r2" and labels[L.REVISION] == "2"
    assert service["spec"]["selector"] == L.role_selector(f"{owner}-r2", "router")
    assert "--quantization" in str(engines["spec"]["template"]["spec"]["containers"][0])
    # The endpoint's own objects stay as they were: revision 1, its own selector.
    main = emulator.get("apps/v1", "Deployment", NS, "kchat-engine")
    assert main["metadata"]["labels"][L.REVISION] == "1"

    put_pod(emulator, "kchat-r2", f"{owner}-r2", 2, "kchat-r2-engine-1", "engine")
    put_pod(emulator, "kchat-r2", f"{owner}-r2", 2, "kchat-r2-router-1", "router")
    deployment = step(deployment)
    canary = Canary.objects.get(deployment=deployment, status=CanaryStatus.RUNNING)
    assert canary.ready_replicas == 1
    assert canary.router_url == f"http://kchat-r2-router.{NS}.svc:8000"
    assert deployment.current_revision.number == 1 and deployment.status == ACTIVE

    canary_services.abort_canary(actor, deployment.pk)
    deployment = step(deployment)
    assert emulator.get("apps/v1", "Deployment", NS, "kchat-r2-engine") is None
    assert emulator.get("v1", "Service", NS, "kchat-r2-router") is None
    assert emulator.get("apps/v1", "Deployment", NS, "kchat-engine") is not None
    # Its pods are the cluster's to remove (no controller runs here): until they are gone the
    # pool is not marked removed, and each pass asks again.
    assert not Canary.objects.get(pk=canary.pk).pool_removed
