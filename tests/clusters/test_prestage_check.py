"""Pre-staging weights asks for a per-node model cache (issue 29 item 6): a cluster whose cache
is a shared claim, or none, says so before the endpoint is deployed there."""

from __future__ import annotations

from deployments.clusters.checks import cluster_issues
from runtime.spec import RuntimeSpec

SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"prestage_weights": True},
}


def _codes(model_cache: dict[str, object] | None) -> list[str]:
    settings = {"model_cache": model_cache} if model_cache else {}
    return [i.code for i in cluster_issues(settings, None, RuntimeSpec.model_validate(SPEC), 1)]


def test_prestaging_is_flagged_where_the_cluster_has_no_per_node_cache() -> None:
    assert "prestage_needs_node_cache" not in _codes(None)  # the default: hostPath per node
    assert "prestage_needs_node_cache" in _codes({"type": "none"})
