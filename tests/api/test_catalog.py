"""/api/v1/gpus, /models and /validate (a dry run: issues, memory fit, cost)."""

from __future__ import annotations

from tests.api.conftest import SPEC, Clients, fields_of, spec_with


def test_gpu_and_model_catalogues(api: Clients) -> None:
    gpus = api.carol.get("gpus").json()
    h100 = next(g for g in gpus if g["id"] == "H100-SXM")
    assert h100["memory_gib"] > 70 and h100["price_per_gpu_hour"] > 0
    models = api.carol.get("models").json()
    assert any(m["hf_repo"] == "meta-llama/Llama-3.1-8B-Instruct" for m in models)
    assert api.anonymous.get("gpus").status_code == 401


def test_validate_a_good_spec_reports_fit_and_cost(api: Clients) -> None:
    body = api.carol.post("validate", {"spec": SPEC}).json()
    assert body["valid"] is True
    assert body["estimate"]["fits"] is True and body["estimate"]["cost_per_hour_min"] > 0
    assert body["estimate"]["gpus_per_replica"] == 1


def test_validate_reports_headroom_and_words_not_paths(api: Clients) -> None:
    spec = spec_with(batching={"max_running_requests": 256})
    body = api.carol.post("validate", {"spec": spec}).json()
    estimate = body["estimate"]
    assert estimate["concurrent_requests"] == 3 and estimate["max_running_requests"] == 256
    [warning] = [i for i in body["issues"] if i["code"] == "memory_below_max_running"]
    assert warning["field"] == "spec.batching.max_running_requests"  # the path stays a path
    assert "set max running requests to 3" in warning["fix"]  # the text says it in words


def test_validate_reports_errors_by_field_without_creating_anything(api: Clients) -> None:
    body = api.carol.post("validate", {"spec": spec_with(parallelism={"tp": 3})}).json()
    assert body["valid"] is False
    [issue] = [i for i in body["issues"] if i["severity"] == "error"]
    assert issue["field"] == "spec.parallelism.tp" and issue["fix"]
    unparsable = api.carol.post("validate", {"spec": {"model": {}}}).json()
    assert unparsable["valid"] is False and unparsable["estimate"] is None
    assert "spec.hardware" in [i["field"] for i in unparsable["issues"]]
    assert fields_of(api.carol.post("validate", {"spec": "x"})) == ["spec"]
    assert fields_of(api.carol.post("validate", {"spec": SPEC, "extra": 1})) == ["extra"]
