"""Weights are downloaded into the cluster's model cache once, and only the download sees the
model hub token.

Per claim (an existing one or one per endpoint): a Job downloads into it and engine pods wait for
its markers. Per node (hostPath): an init container of each engine pod downloads unless the
marker is there. Without a shared cache the engine downloads, with the token, itself. Every
variant is valid Kubernetes 1.29-1.34 (strict) and against the LWS CRD; the download and wait
scripts run for real under ``sh``, with a stand-in ``hf`` on PATH (the one seam: no network).

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py) in the driver tests at the end: a
failed download is written with exact last words (a hub token to mask, a long progress bar to cut),
a second try is checked by the Job's uid, and the cache test counts that observing asks the API
nothing. A Job downloading and being replaced for other models on the real Job controller is
tests/kube_real/test_endpoint_on_real_cluster.py::test_weights_download_job_into_a_claim_then_ready.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from deployments.cluster_settings import (
    ClaimCache,
    ClusterSettings,
    HostPathCache,
    NoCache,
    SharedClaimCache,
)
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient, kind_of
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.informer import ClusterCache
from deployments.drivers.kube.render import KubeOptions, render_revision
from deployments.drivers.kube.weights import Weights, weights_of
from runtime.spec import MODEL_CACHE_PATH
from tests.drivers.kube_emulator import CLIENT_TIMEOUT_S, RunningEmulator, running_emulator
from tests.drivers.reference_specs import REF, golden_names, load_spec, revision_plan
from tests.drivers.test_fences import pod_specs
from tests.drivers.test_manifests import K8S_VERSIONS, lws_schema
from tests.waiting import wait_until

TOKEN = "hf_token_value_never_in_an_engine"
CACHES: dict[str, Any] = {
    "host_path": HostPathCache(),
    "claim": ClaimCache(claim_name="models"),
    "rwx": SharedClaimCache(),
    "none": NoCache(),
}


def rendered(
    name: str = "llama-3.1-8b-h100", cache: str = "host_path", number: int = 1, **settings: Any
) -> list[dict[str, Any]]:
    cluster = ClusterSettings(model_cache=CACHES[cache], **settings)
    plan = revision_plan(load_spec(name), number=number, hf_token=TOKEN)
    return render_revision(REF, plan, KubeOptions(cluster=cluster))


def jobs(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == "Job"]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def has_token(container: dict[str, Any]) -> bool:
    return "HF_TOKEN" in env_of(container)


# What the cache changes: the download Job and the engines' pod templates (the rest is checked
# for every spec by tests/drivers/test_manifests.py).
CHANGED = {"Job", "Deployment", "LeaderWorkerSet"}
# A draft model (two downloads), a multi-node LeaderWorkerSet, prefill and decode pools.
VARIED = ["llama-3.3-70b-tp4-fp8-eagle3-h100", "deepseek-v3-tp16-2x-h200", "llama-3.1-70b-pd-h100"]


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_cache_variant_validates_strictly(version: str) -> None:
    for name in VARIED:
        for cache in CACHES:
            for settings in ({}, {"engine_run_as_user": 1000, "read_only_root": False}):
                for obj in rendered(name, cache, **settings):
                    if obj["kind"] == "LeaderWorkerSet":
                        jsonschema.validate(obj, lws_schema())
                    elif obj["kind"] in CHANGED and obj["metadata"]["name"] != "chat-router":
                        kubernetes_validate.validate(obj, version, strict=True)


def test_the_weights_are_what_the_engines_load_model_and_draft() -> None:
    eagle = revision_plan(load_spec("llama-3.3-70b-tp4-fp8-eagle3-h100"))
    spec = load_spec("llama-3.3-70b-tp4-fp8-eagle3-h100")
    assert spec.speculator.draft_model
    assert [w.repo for w in weights_of(eagle)] == [spec.model.source, spec.speculator.draft_model]
    # Prefill and decode load the same model: one download.
    assert len(weights_of(revision_plan(load_spec("llama-3.1-70b-pd-h100")))) == 1
    pinned = load_spec("llama-3.1-8b-h100")
    pinned = pinned.model_copy(
        update={"model": pinned.model.model_copy(update={"revision": "refs/pr/1"})}
    )
    [weights] = weights_of(revision_plan(pinned))
    assert weights.revision == "refs/pr/1"
    assert weights.marker == (
        f"{MODEL_CACHE_PATH}/plinth-ready/{weights.repo.replace('/', '--')}@refs/pr/1"
    )
    local = pinned.model_copy(
        update={"model": pinned.model.model_copy(update={"source": f"{MODEL_CACHE_PATH}/mine"})}
    )
    assert weights_of(revision_plan(local)) == []  # in the cache already: nothing to fetch
    # Repo ids never hold "--" or "@": "/" as "--" keeps two repositories' markers apart.
    markers = {Weights("org/name").marker, Weights("org-name").marker}
    markers |= {Weights("org/name", "main").marker, Weights("org/name", "v1").marker}
    assert len(markers) == 4


@pytest.mark.parametrize("name", golden_names())
def test_per_node_each_engine_pod_downloads_first_and_only_it_has_the_token(name: str) -> None:
    objs = rendered(name, "host_path")
    assert not jobs(objs)
    expected = weights_of(revision_plan(load_spec(name)))
    for owner, template in pod_specs(objs):
        pod = template["spec"]
        [engine] = pod["containers"]
        if engine["name"] == "router":
            assert "initContainers" not in pod and not has_token(engine)
            continue
        assert not has_token(engine), owner
        assert env_of(engine)["HF_HUB_OFFLINE"] == "1"  # loads from the cache, never the hub
        init = pod["initContainers"]
        assert [env_of(c)["PLINTH_WEIGHTS_REPO"] for c in init] == [w.repo for w in expected]
        assert all(has_token(c) for c in init), owner
        assert all(c["image"] == engine["image"] for c in init)  # huggingface_hub is in it
        for container in init:
            mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            assert mounts == {"model-cache": MODEL_CACHE_PATH, "tmp": "/tmp"}
    # The token's value is in its Secret only.
    assert [o["kind"] for o in objs if TOKEN in json.dumps(o)] == ["Secret"]


@pytest.mark.parametrize("cache", ["claim", "rwx"])
def test_per_claim_one_job_downloads_and_the_engines_wait_for_it(cache: str) -> None:
    objs = rendered("llama-3.3-70b-tp4-fp8-eagle3-h100", cache)
    [job] = jobs(objs)
    pod = job["spec"]["template"]["spec"]
    # Each try a pod of its own, kept once failed with its log's last lines to say why.
    assert pod["restartPolicy"] == "Never"
    assert {c["terminationMessagePolicy"] for c in pod["containers"]} == {"FallbackToLogsOnError"}
    assert all(has_token(c) for c in pod["containers"])
    assert len(pod["containers"]) == 2  # the model and the draft model
    claim = "models" if cache == "claim" else "chat-model-cache"
    [volume] = [v for v in pod["volumes"] if v["name"] == "model-cache"]
    assert volume["persistentVolumeClaim"]["claimName"] == claim
    # Its pods are not the endpoint's replicas: no endpoint label for observe to count.
    assert L.DEPLOYMENT not in job["spec"]["template"]["metadata"]["labels"]
    assert job["metadata"]["labels"][L.DEPLOYMENT] == REF.id  # the Job itself is owned
    # Dependencies first: the claim and the token's Secret before the Job, the Job before
    # the engines that wait for it.
    order = [o["kind"] for o in objs]
    assert order.index("Secret") < order.index("Job") < order.index("Deployment")
    if cache == "rwx":
        assert order.index("PersistentVolumeClaim") < order.index("Job")
    markers = " ".join(env_of(c)["PLINTH_WEIGHTS_MARKER"] for c in pod["containers"])
    for owner, template in pod_specs(objs):
        [engine] = template["spec"]["containers"]
        if engine["name"] == "router":
            continue
        assert not has_token(engine), owner
        [wait] = template["spec"]["initContainers"]
        assert wait["name"] == "wait-for-weights" and not has_token(wait)
        assert env_of(wait)["PLINTH_WEIGHTS_MARKERS"] == markers
        assert wait["volumeMounts"][0]["readOnly"] is True


def test_the_job_is_named_by_what_it_downloads_not_by_the_revision() -> None:
    [first] = jobs(rendered("llama-3.1-8b-h100", "claim", number=1))
    [again] = jobs(rendered("llama-3.1-8b-h100", "claim", number=7))
    assert first["metadata"]["name"] == again["metadata"]["name"]
    assert first["spec"] == again["spec"]  # a Job's template never changes in place
    [other] = jobs(rendered("llama-3.3-70b-nvfp4-h100", "claim"))
    assert other["metadata"]["name"] != first["metadata"]["name"]
    [labelled] = jobs(rendered("llama-3.1-8b-h100", "claim", labels={"team": "a"}))
    assert labelled["metadata"]["name"] != first["metadata"]["name"]
    assert all(len(j["metadata"]["name"]) <= 63 for j in (first, other, labelled))


def test_without_a_shared_cache_the_engine_downloads_with_the_token_itself() -> None:
    objs = rendered("llama-3.1-8b-h100", "none")
    assert not jobs(objs)
    for owner, template in pod_specs(objs):
        [engine] = template["spec"]["containers"]
        assert "initContainers" not in template["spec"], owner
        if engine["name"] == "engine":
            assert has_token(engine) and "HF_HUB_OFFLINE" not in env_of(engine)
            [cache] = [v for v in template["spec"]["volumes"] if v["name"] == "model-cache"]
            assert cache == {"name": "model-cache", "emptyDir": {}}


# --- the scripts, run ----------------------------------------------------------------------


def _script(container: dict[str, Any]) -> str:
    shell, flag, script = container["command"]
    assert (shell, flag) == ("/bin/sh", "-c")
    return str(script).replace("$$", "$")  # as Kubernetes passes an escaped '$' on


def _fake_cli(folder: Path, name: str, log: Path) -> None:
    """A stand-in for huggingface_hub's CLI: records its arguments, writes a file in the cache."""
    path = folder / name
    path.write_text(
        f'#!/bin/sh\necho "{name} $*" >> "{log}"\n'
        'mkdir -p "$HF_HOME/hub" && echo weights > "$HF_HOME/hub/model.safetensors"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _run(container: dict[str, Any], cache: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {
        k: str(v).replace(MODEL_CACHE_PATH, str(cache))
        for k, v in env_of(container).items()
        if isinstance(v, str)
    }
    env.update(PATH=path, HF_HOME=str(cache), HOME=str(cache.parent))
    return subprocess.run(
        ["/bin/sh", "-c", _script(container)], env=env, capture_output=True, text=True, timeout=30
    )


def test_the_download_runs_once_per_cache_then_the_marker_skips_it(tmp_path: Path) -> None:
    spec = load_spec("llama-3.1-8b-h100")
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"revision": "abc"})})
    plan = revision_plan(spec, hf_token=TOKEN)
    objs = render_revision(REF, plan, KubeOptions())
    [container] = dict(pod_specs(objs))["chat-engine"]["spec"]["initContainers"]
    bin_dir, cache, log = tmp_path / "bin", tmp_path / "cache", tmp_path / "calls"
    bin_dir.mkdir()
    cache.mkdir()
    _fake_cli(bin_dir, "hf", log)
    path = f"{bin_dir}:{os.environ['PATH']}"
    first = _run(container, cache, path)
    assert first.returncode == 0, first.stderr
    assert log.read_text().splitlines() == [f"hf download {spec.model.source} --revision abc"]
    marker = Path(env_of(container)["PLINTH_WEIGHTS_MARKER"].replace(MODEL_CACHE_PATH, str(cache)))
    assert marker.is_file()
    second = _run(container, cache, path)
    assert second.returncode == 0 and "in the model cache already" in second.stdout
    assert len(log.read_text().splitlines()) == 1  # not downloaded again

    # An image before huggingface_hub 0.34 has only huggingface-cli; a failed download leaves
    # no marker, so the next start tries again.
    (bin_dir / "hf").unlink()
    marker.unlink()
    _fake_cli(bin_dir, "huggingface-cli", log)
    assert _run(container, cache, path).returncode == 0
    assert log.read_text().splitlines()[-1].startswith("huggingface-cli download ")
    marker.unlink()
    (bin_dir / "huggingface-cli").write_text("#!/bin/sh\nexit 3\n")
    assert _run(container, cache, path).returncode != 0
    assert not marker.exists()


def test_engines_wait_until_the_job_left_every_marker(tmp_path: Path) -> None:
    objs = rendered("llama-3.3-70b-tp4-fp8-eagle3-h100", "claim")
    [wait] = dict(pod_specs(objs))["chat-engine"]["spec"]["initContainers"]
    cache = tmp_path / "cache"
    for marker in env_of(wait)["PLINTH_WEIGHTS_MARKERS"].split():
        done = Path(marker.replace(MODEL_CACHE_PATH, str(cache)))
        done.parent.mkdir(parents=True, exist_ok=True)
        done.touch()
    assert _run(wait, cache, os.environ["PATH"]).returncode == 0
    first = Path(env_of(wait)["PLINTH_WEIGHTS_MARKERS"].split()[0].replace(MODEL_CACHE_PATH, ""))
    (cache / first.relative_to("/")).unlink()
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run(  # waits for a marker that never comes
            ["/bin/sh", "-c", _script(wait)],
            env={
                "PATH": os.environ["PATH"],
                "PLINTH_WEIGHTS_MARKERS": env_of(wait)["PLINTH_WEIGHTS_MARKERS"].replace(
                    MODEL_CACHE_PATH, str(cache)
                ),
            },
            capture_output=True,
            timeout=2,
        )


# --- the driver, against the Kubernetes API emulator ---------------------------------------


def test_the_driver_applies_the_job_prunes_it_for_other_models_and_deletes_it() -> None:
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    cluster = ClusterSettings(model_cache=ClaimCache(claim_name="models"))
    with running_emulator() as emulator:
        client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
        try:
            driver = KubeDriver(client, KubeOptions(cluster=cluster))
            first = revision_plan(load_spec("llama-3.1-8b-h100"), hf_token=TOKEN)
            driver.apply(REF, first)
            [job] = jobs(render_revision(REF, first, driver.options))
            name = job["metadata"]["name"]
            assert emulator.get("batch/v1", "Job", REF.namespace, name) is not None
            # Another model: a new Job (a Job's template cannot change), the old one pruned.
            other = revision_plan(load_spec("llama-3.3-70b-nvfp4-h100"), number=2)
            driver.apply(REF, other)
            [renamed] = jobs(render_revision(REF, other, driver.options))
            assert renamed["metadata"]["name"] != name
            assert emulator.get("batch/v1", "Job", REF.namespace, name) is None
            assert emulator.get("batch/v1", "Job", REF.namespace, renamed["metadata"]["name"])
            # Stopping keeps it (the cache stays filled); deleting the endpoint takes it.
            driver.stop(REF)
            assert emulator.get("batch/v1", "Job", REF.namespace, renamed["metadata"]["name"])
            driver.delete(REF)
            assert (
                emulator.get("batch/v1", "Job", REF.namespace, renamed["metadata"]["name"]) is None
            )
        finally:
            client.close()


# A Job's pods carry its uid in this label (the Job controller's, Kubernetes 1.27+).
JOB_UID = "batch.kubernetes.io/controller-uid"


def _the_job(emulator: RunningEmulator, client: KubeClient) -> dict[str, Any]:
    [job] = client.list(kind_of("batch/v1", "Job"), REF.namespace)
    return job


def _give_up(emulator: RunningEmulator, job: dict[str, Any], last_words: str) -> None:
    """As the Job controller: a failed pod (its log's end as termination message), then the
    Job's Failed condition."""
    meta = job["metadata"]
    labels = {**job["spec"]["template"]["metadata"]["labels"], JOB_UID: meta["uid"]}
    terminated = {"exitCode": 1, "reason": "Error", "message": last_words}
    pod = {
        "metadata": {"name": f"{meta['name']}-a", "namespace": REF.namespace, "labels": labels},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "weights-0", "state": {"terminated": terminated}}],
        },
    }
    emulator.put("v1", "Pod", REF.namespace, pod)
    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
              "message": "Job has reached the specified backoff limit"}  # fmt: skip
    emulator.put("batch/v1", "Job", REF.namespace, {**job, "status": {"conditions": [failed]}})


def test_a_failed_download_is_its_revisions_failure_until_another_revision_replaces_it() -> None:
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    cluster = ClusterSettings(model_cache=ClaimCache(claim_name="models"))
    spec = load_spec("llama-3.1-8b-h100")
    with running_emulator() as emulator:
        client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
        try:
            driver = KubeDriver(client, KubeOptions(cluster=cluster))
            driver.apply(REF, revision_plan(spec, number=1, hf_token=TOKEN))
            assert driver.observe(REF).failures == ()
            job = _the_job(emulator, client)
            noise = "Fetching 4 files: 0%| | 0/4 " * 40
            _give_up(
                emulator, job, f"{noise}\nhf_abcdefghijklmnop rejected:\n401 Repository Not Found"
            )
            seen = driver.observe(REF)
            [failure] = seen.failures
            assert seen.failure(1) == failure and seen.failure(2) is None
            assert failure.reason == "BackoffLimitExceeded"
            assert failure.message.startswith(
                f"the weights download (Job {job['metadata']['name']}) failed: Job has reached "
                "the specified backoff limit; weights-0 exited with code 1: …"
            )
            # The end of its log, where the error is, on one line; a token never shown.
            assert failure.message.endswith("hf_*** rejected: 401 Repository Not Found")
            assert "hf_abcdefghijklmnop" not in failure.message and len(failure.message) < 600

            # Placed again, the revision keeps its failed Job: its rollout stays failed.
            driver.apply(REF, revision_plan(spec, number=1, hf_token=TOKEN))
            assert _the_job(emulator, client)["metadata"]["uid"] == job["metadata"]["uid"]
            # Another revision of the same models gets a fresh try of the same Job.
            driver.apply(REF, revision_plan(spec, number=2, hf_token=TOKEN))
            fresh = _the_job(emulator, client)
            assert fresh["metadata"]["name"] == job["metadata"]["name"]
            assert fresh["metadata"]["uid"] != job["metadata"]["uid"]
            assert "status" not in fresh and driver.observe(REF).failures == ()
        finally:
            client.close()


def test_the_workers_cache_sees_a_failed_download() -> None:
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    cluster = ClusterSettings(model_cache=ClaimCache(claim_name="models"))
    with running_emulator() as emulator:
        client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
        watching = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
        cache = ClusterCache(watching, REF.namespace).start()
        try:
            assert all(informer.wait_synced(10) for informer in cache.informers.values())
            driver = KubeDriver(client, KubeOptions(cluster=cluster), cache=cache)
            driver.apply(REF, revision_plan(load_spec("llama-3.1-8b-h100")))
            job = _the_job(emulator, client)
            _give_up(emulator, job, "401 Repository Not Found")
            jobs, name = cache.informers["Job"], job["metadata"]["name"]
            wait_until(lambda: (jobs.get(REF.namespace, name) or {}).get("status"), "seen")
            pods = cache.informers["Pod"]
            wait_until(lambda: pods.get(REF.namespace, f"{name}-a"), "its pod seen")
            start = len(emulator.emulator._requests)
            [failure] = driver.observe(REF).failures
            assert failure.message.endswith(
                "weights-0 exited with code 1: 401 Repository Not Found"
            )
            asked = list(emulator.emulator._requests)[start:]
            assert [r for r in asked if r.params.get("watch") != "true"] == []  # all cached
        finally:
            cache.stop()
            client.close()
