"""POST /api/v1/optimize: ranked candidates with predicted figures and reasons, for any member."""

from __future__ import annotations

import pytest
from django.utils import timezone

from deployments.clusters.models import Cluster
from tests.api.conftest import Clients, error_of, fields_of
from tests.conftest import Cast
from tests.fixtures.measured import measure, model_of, serving_endpoint


def test_optimize_ranks_valid_candidates_with_reasons(api: Clients) -> None:
    body = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpus": ["H100-SXM", "L40S"],
        "traffic": {"input_tokens": 2000, "output_tokens": 200, "rate_rps": 6, "turns": 2},
        "slo": {"ttft_p90_s": 1.0, "itl_p90_s": 0.04},
    }
    response = api.carol.post("optimize", body)
    assert response.status_code == 200, response.content
    data = response.json()
    best = data["best"]
    assert best is not None and best["predicted"]["meets_slo"] is True
    assert best["predicted"]["itl_p90_s"] <= 0.04 and best["reasons"]
    assert data["ranked"][0]["label"] == best["label"] and best["warnings"] == []
    # By cost, those with a validation warning of their own listed after the rest (issue 27).
    warned = [bool(c["warnings"]) for c in data["ranked"]]
    assert warned == sorted(warned)
    costs = [c["predicted"]["cost_per_hour"] for c in data["ranked"] if not c["warnings"]]
    assert costs == sorted(costs)
    assert data["waterfall"][0]["step"] == "baseline"
    # The recommendation is one click from deployed: /validate accepts it as it stands.
    check = api.carol.post("validate", {"spec": best["spec"]}).json()
    assert check["valid"] is True, check["issues"]


def test_optimize_refuses_bad_input_by_field(api: Clients) -> None:
    unknown = api.carol.post("optimize", {"model": "acme/unknown-model"})
    assert error_of(unknown)["fields"][0]["field"] == "model"
    bad_gpu = api.carol.post("optimize", {"model": "llama-3.1-8b", "gpus": ["TPU-v9"]})
    assert error_of(bad_gpu)["fields"][0]["field"] == "gpus"
    both = {"model": "llama-3.1-8b", "traffic": {"rate_rps": 1, "concurrency": 4}}
    assert fields_of(api.carol.post("optimize", both)) == ["traffic"]
    assert fields_of(api.carol.post("optimize", {"model": "llama-3.1-8b", "x": 1})) == ["x"]
    assert api.anonymous.post("optimize", {"model": "llama-3.1-8b"}).status_code == 401


def test_optimize_within_a_clusters_free_gpus(api: Clients, cast: Cast) -> None:
    """With `cluster_id`, only the GPU types the cluster has, and no more of them than are free."""
    cluster = Cluster.objects.create(
        organization=cast.acme,
        name="gpus",
        kind="kubernetes",
        namespace="team-a",
        gpu_inventory={"nodes": [], "gpus": {"H200": {"nodes": 1, "gpus": 8, "free": 2}},
                       "error": ""},
    )  # fmt: skip
    body = {
        "model": "llama-3.1-8b",
        "cluster_id": str(cluster.pk),
        "traffic": {"rate_rps": 40},
        "slo": {"ttft_p90_s": 1.0, "itl_p90_s": 0.05},
    }
    data = api.carol.post("optimize", body).json()
    assert data["ranked"], data["notes"]
    for candidate in data["ranked"]:
        assert candidate["spec"]["hardware"]["gpu"] == "H200"
        assert candidate["predicted"]["gpus"] <= 2
    other = api.bob.post("optimize", body)  # another organization's cluster: not found
    assert other.status_code == 404


def test_confirm_runs_the_top_picks_in_simulated_time(api: Clients) -> None:
    """`confirm: true` adds what a short simulated run measured next to each prediction."""
    body = {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpus": ["H100-SXM"],
        "traffic": {"input_tokens": 1024, "output_tokens": 128, "rate_rps": 10},
        "slo": {"ttft_p90_s": 1.0, "itl_p90_s": 0.05},
        "confirm": True,
        "confirm_top": 2,
    }
    data = api.carol.post("optimize", body).json()
    first, second, *rest = data["ranked"]
    for candidate in (first, second):
        measured = candidate["measured"]
        assert measured["completed"] == measured["requests"] > 0
        assert measured["ttft_p90_s"] > 0 and measured["itl_p90_s"] > 0
        assert measured["output_tokens_per_s"] > 0 and measured["simulated_s"] > 0
    assert data["best"]["measured"] == first["measured"]
    assert all(c["measured"] is None for c in rest)
    plain = api.carol.post("optimize", {**body, "confirm": False}).json()
    assert plain["best"]["measured"] is None
    assert fields_of(api.carol.post("optimize", {**body, "confirm_top": 9})) == ["confirm_top"]
    assert fields_of(api.carol.post("optimize", {**body, "confirm": "yes"})) == ["confirm"]


def test_a_pick_applied_by_patch_is_a_revision_saying_so(api: Clients, endpoint: object) -> None:
    """Applying a candidate is the normal PATCH with its spec and a message naming its source."""
    body = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpus": ["L40S"]}
    best = api.dave.post("optimize", body).json()["best"]
    message = f"from the optimizer: {best['label']}"
    patch = {"spec": best["spec"], "base_revision": 1, "message": message}
    response = api.dave.patch("deployments/chat", patch)
    assert response.status_code == 200, response.content
    revisions = api.carol.get("deployments/chat/revisions").json()["items"]
    assert revisions[0]["number"] == 2 and revisions[0]["message"] == message
    assert api.carol.patch("deployments/chat", {**patch, "base_revision": 2}).status_code == 403


# --- recommending for an endpoint: its own traffic corrects the model ----------------------------

FOR_CHAT = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "gpus": ["H100-SXM"],
    "traffic": {"input_tokens": 1024, "output_tokens": 256, "rate_rps": 20},
    "slo": {"ttft_p90_s": 1.0, "itl_p90_s": 0.024},
}


def test_for_an_endpoint_its_measured_correction_scales_the_predictions(
    api: Clients, cast: Cast
) -> None:
    served = serving_endpoint(cast, "served")
    rate = 0.5 * model_of(served).capacity_rps(0.5, 0.04)
    # The endpoint's ITL runs 30% over its model; its TTFT as modelled.
    measure(served, ttft=[1.0] * 8, itl=[1.3] * 8, rate_per_replica=rate, end=timezone.now())
    plain = api.carol.post("optimize", FOR_CHAT).json()
    assert plain["correction"] is None
    # The uncorrected pick's ITL, 30% longer, would miss the target.
    assert plain["best"]["predicted"]["itl_p90_s"] * 1.3 > 0.024

    data = api.carol.post("optimize", {**FOR_CHAT, "deployment_id": "served"}).json()

    assert data["correction"]["deployment"] == "served" and data["correction"]["revision"] == 1
    assert data["correction"]["factors"]["itl"] == pytest.approx(1.3, rel=1e-3)
    best = data["best"]
    assert best["predicted"]["meets_slo"] and best["predicted"]["itl_p90_s"] <= 0.024
    assert best["label"] != plain["best"]["label"]
    assert best["predicted"]["cost_per_hour"] >= plain["best"]["predicted"]["cost_per_hour"]
    for candidate in data["ranked"]:
        assert any("corrected by served's measured traffic (ITL +30%" in r
                   for r in candidate["reasons"])  # fmt: skip
    assert any("corrected by endpoint served" in note for note in data["notes"])


def test_an_endpoint_without_measured_traffic_leaves_the_model_as_it_is(
    api: Clients, cast: Cast
) -> None:
    serving_endpoint(cast, "served")
    data = api.carol.post("optimize", {**FOR_CHAT, "deployment_id": "served"}).json()
    assert data["correction"] is None
    assert not any("measured traffic" in r for r in data["best"]["reasons"])


def test_an_endpoint_of_another_model_or_organization_is_refused(api: Clients, cast: Cast) -> None:
    serving_endpoint(cast, "served")
    other_model = api.carol.post(
        "optimize", {**FOR_CHAT, "model": "Qwen/Qwen2.5-7B-Instruct", "deployment_id": "served"}
    )
    assert fields_of(other_model) == ["deployment_id"]
    assert api.bob.post("optimize", {**FOR_CHAT, "deployment_id": "served"}).status_code == 404


def test_the_waterfall_starts_from_the_endpoints_serving_revision(
    api: Clients, endpoint: object
) -> None:
    """`deployment_id` names an endpoint of the model: its serving revision, priced at this
    traffic, is the waterfall's baseline; without it, the model's simplest deployment is."""
    body = {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpus": ["H100-SXM", "L40S"],
            "traffic": {"rate_rps": 8}}  # fmt: skip
    response = api.carol.post("optimize", {**body, "deployment_id": "chat"})
    assert response.status_code == 200, response.content
    base = response.json()["waterfall"][0]
    assert base["step"] == "baseline"
    assert base["candidate"]["spec"]["autoscaling"]["max_replicas"] == 4  # the revision's own
    assert base["candidate"]["spec"]["hardware"]["gpu"] == "H100-SXM"
    assert any("current revision" in r for r in base["candidate"]["reasons"])
    plain = api.carol.post("optimize", body).json()["waterfall"][0]["candidate"]
    assert any("simplest valid deployment" in r for r in plain["reasons"])
    assert api.bob.post("optimize", {**body, "deployment_id": "chat"}).status_code == 404


def test_a_mean_per_token_target_alone_holds_the_itl_p90_too(api: Clients) -> None:
    body = {
        "model": "llama-3.1-8b",
        "gpus": ["H100-SXM"],
        "traffic": {"input_tokens": 4000, "rate_rps": 4},
        "slo": {"tpot_mean_s": 0.01},
    }
    best = api.carol.post("optimize", body).json()["best"]
    assert best["predicted"]["meets_slo"] and best["predicted"]["itl_p90_s"] <= 0.01
