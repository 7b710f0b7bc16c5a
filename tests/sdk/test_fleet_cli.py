"""``plinth place``, ``plinth drain`` and ``plinth undrain`` with the installed command against a
running Plinth: an endpoint placed on two clusters, a cluster drained and undrained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane import services as platform
from deployments.clusters import services as cluster_services
from deployments.clusters.models import Cluster
from deployments.endpoints import services
from deployments.fleet.models import Placement
from tests.conftest import Cast
from tests.fixtures.sdk import SdkEnv
from tests.sdk.test_cli import Cli

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process

SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 1, "max_replicas": 4},
}


def test_an_endpoint_is_placed_and_a_cluster_drained_from_the_command_line(
    cast: Cast, sdk_env: SdkEnv, server: str, admin_key: str, tmp_path: Path
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name="kc", value="apiVersion: v1\nkind: Config\n")
    cluster_services.create_cluster(actor, name="gpu-east", kubeconfig_secret_id=secret.pk)
    services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC)
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")

    out = plinth("place", "chat", "local", "gpu-east:min=1,weight=2", "--policy", "spread")
    assert "gpu-east" in out and "local" in out, out
    east = Placement.objects.get(cluster__name="gpu-east")
    assert (east.min_replicas, east.weight) == (1, 2)
    assert east.deployment.placement_policy == "spread"

    drained = json.loads(plinth("drain", "gpu-east", "-o", "json"))
    assert drained["draining"] is True and drained["endpoints"] == 1
    assert Cluster.objects.get(name="gpu-east").draining_since is not None
    assert "draining: False" in plinth("undrain", "gpu-east")

    # Refusals: the API's field (5), a malformed cluster entry (2), an unknown cluster (3).
    assert "clusters[0].cluster" in plinth("place", "chat", "nowhere", code=5)
    assert "policy" in plinth("place", "chat", "local", "--policy", "fastest", code=5)
    plinth("place", "chat", "gpu-east:min=lots", code=2)
    plinth("drain", "nowhere", code=3)
