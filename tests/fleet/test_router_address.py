"""How the gateway reaches an endpoint's router on a cluster: the cluster's ``router_address``
setting (an ingress or load balancer per cluster), else the address the driver observed."""

from __future__ import annotations

import pytest

from deployments.cluster_settings import SettingsInvalid, parse_settings
from deployments.clusters.models import Cluster, ClusterKind
from deployments.fleet.models import Placement
from deployments.fleet.placing import router_url_for

OBSERVED = "http://chat-router.plinth.svc:30000"


def _placement(settings: dict[str, object]) -> Placement:
    cluster = Cluster(name="gpu-east", kind=ClusterKind.KUBERNETES, operator_settings=settings)
    return Placement(cluster=cluster)


def test_the_clusters_router_address_names_the_endpoint() -> None:
    placement = _placement({"router_address": "https://{endpoint}.gpu-east.example.com/"})
    assert router_url_for(placement, "chat", OBSERVED) == "https://chat.gpu-east.example.com"
    # No router there yet: nothing to route to, whatever the template says.
    assert router_url_for(placement, "chat", "") == ""


def test_without_one_the_observed_address_is_used() -> None:
    assert router_url_for(_placement({}), "chat", OBSERVED) == OBSERVED


@pytest.mark.parametrize(
    "address",
    [
        "ftp://{endpoint}.example.com",
        "https://user:pw@{endpoint}.example.com",
        "https://{endpoint}.{region}.example.com",
        "https://{endpoint}.example.com/?x=1",
    ],
)
def test_a_router_address_that_is_no_plain_url_is_refused(address: str) -> None:
    with pytest.raises(SettingsInvalid) as refused:
        parse_settings({"router_address": address})
    assert "router_address" in str(refused.value)
