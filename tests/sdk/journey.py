"""A user's script against a running Plinth, run by the SDK's own venv (no Django there).

Run as ``python journey.py`` with PLINTH_URL and PLINTH_API_KEY set; every step asserts, and the
last line printed is ``journey ok``. Not collected by pytest: test_sdk.py runs it.
"""

from __future__ import annotations

import asyncio
import importlib.util

import plinth
from plinth import apply, models

SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 1, "max_replicas": 4},
}

assert importlib.util.find_spec("django") is None, "the SDK must install without Django"

client = plinth.Plinth()  # from PLINTH_URL / PLINTH_API_KEY

# Create, typed answers.
first = client.endpoints.create("sdk-one", SPEC, labels={"team": "search"}, message="first")
assert isinstance(first, models.DeploymentDetailOut)
assert first.target_revision == 1 and first.labels == {"team": "search"}
client.endpoints.create("sdk-two", SPEC)

# Pagination: pages of one still give every endpoint, each typed.
listed = list(client.endpoints.list(page_size=1))
assert sorted(e.slug for e in listed) == ["sdk-one", "sdk-two"], listed
assert all(isinstance(e, models.DeploymentOut) for e in listed)
assert [e.slug for e in client.endpoints.list(labels={"team": "search"})] == ["sdk-one"]

# A refused input: a typed exception carrying the field path and its fix.
try:
    client.endpoints.create("sdk-bad", {**SPEC, "parallelism": {"tp": 3}})
    raise AssertionError("tp=3 was accepted")
except plinth.ValidationFailed as exc:
    assert exc.status == 422 and exc.fields, exc
    assert any(f.field.startswith("spec.parallelism") and f.fix for f in exc.fields), exc.fields

# Edit, then a stale edit is a conflict, not an overwrite.
edited = {**SPEC, "autoscaling": {"min_replicas": 1, "max_replicas": 6}}
updated = client.endpoints.update("sdk-one", edited, base_revision=1, message="wider")
assert updated.target_revision == 2
try:
    client.endpoints.update("sdk-one", SPEC, base_revision=1)
    raise AssertionError("a stale base revision was accepted")
except plinth.Conflict as exc:
    assert exc.code == "revision_conflict" and exc.fields[0].field == "base_revision", exc

# Revisions and their diff, then a rollback.
assert [r.number for r in client.revisions.list("sdk-one")] == [2, 1]
diff = client.revisions.diff("sdk-one", 1, 2)
assert [(c.path, c.before, c.after) for c in diff.changes] == [
    ("autoscaling.max_replicas", 4, 6)
], diff
rolled = client.endpoints.rollback("sdk-one", 1)
assert rolled.target_revision == 3 and rolled.spec["autoscaling"]["max_replicas"] == 4

# The dry-run diff against what is deployed (what `plinth diff` shows).
checked = client.endpoints.validate(edited, compare_to="sdk-one")
assert checked.valid and checked.target_revision == 3
assert [c.path for c in checked.changes or []] == ["autoscaling.max_replicas"]

# Lifecycle.
assert client.endpoints.scale("sdk-two", 2).desired_replicas == 2
assert client.endpoints.stop("sdk-two").desired_state == "stopped"
assert client.endpoints.start("sdk-two").desired_state == "running"
assert client.endpoints.get("sdk-two").slug == "sdk-two"
try:
    client.endpoints.get("no-such-endpoint")
    raise AssertionError("a missing endpoint was found")
except plinth.NotFound as exc:
    assert exc.status == 404

# Keys, secrets, clusters, usage, audit, logs.
key = client.keys.create("sdk-inference", kind="inference")
assert key.key and any(k.id == key.id for k in client.keys.list())
assert client.keys.revoke(str(key.id)).revoked_at is not None
secret = client.secrets.set("hf-token", "hf_abc", description="sdk")
assert [s.name for s in client.secrets.list()] == ["hf-token"]
assert "hf_abc" not in secret.model_dump_json()
client.secrets.delete(str(secret.id))
assert [c.kind for c in client.clusters.list()] == ["local"]
assert client.usage.get().rows == [] and client.usage.get("sdk-one").rows == []
assert any(e.action == "deployment.update" for e in client.audit.list(action="deployment.update"))
logs = client.logs.read("sdk-one")
assert isinstance(logs, models.LogsOut)
assert list(client.logs.lines("sdk-one")) == logs.lines

# Declarative apply: a plan made before someone else's edit is refused at apply.
doc = apply.EndpointDocument(name="sdk-two", spec=edited)
plan = apply.plan(client, [doc])
assert [(a.kind, a.base_revision) for a in plan] == [("update", 1)]
client.endpoints.update("sdk-two", SPEC | {"model": {"source": "Qwen/Qwen3-8B"}}, base_revision=1)
try:
    apply.apply(client, plan)
    raise AssertionError("a plan older than the target revision was applied")
except plinth.Conflict:
    pass

# Waiting: no worker runs in this test, so nothing settles and the wait gives up.
try:
    client.endpoints.wait_until_settled("sdk-one", timeout=0.3, interval=0.1)
    raise AssertionError("an endpoint settled with no worker")
except TimeoutError as exc:
    assert "sdk-one" in str(exc)
assert any(e.reason == "SettingsChanged" for e in client.endpoints.events("sdk-one"))

# Deleting.
assert client.endpoints.delete("sdk-two").status == "deleting"

# The optimizer: keyword arguments or a whole typed request, a typed answer, refusals by field.
picks = client.optimize(
    "meta-llama/Llama-3.1-8B-Instruct",
    gpus=["L40S"],
    traffic=models.TrafficIn(input_tokens=2000, output_tokens=200, rate_rps=4),
    slo={"ttft_p90_s": 1.0, "itl_p90_s": 0.05},
)
assert isinstance(picks, models.OptimizeOut) and picks.best is not None, picks.notes
assert picks.best.predicted.meets_slo and picks.best.spec["hardware"]["gpu"] == "L40S"
request = models.OptimizeIn(model="meta-llama/Llama-3.1-8B-Instruct", gpus=["L40S"])
assert client.optimize(request).best is not None
try:
    client.optimize("meta-llama/Llama-3.1-8B-Instruct", traffic={"rate_rps": 1, "concurrency": 2})
    raise AssertionError("both rate and concurrency were accepted")
except plinth.ValidationFailed as exc:
    assert [f.field for f in exc.fields] == ["traffic"], exc


async def async_journey() -> None:
    async with plinth.AsyncPlinth() as aclient:
        one = await aclient.endpoints.get("sdk-one")
        assert one.target_revision == 3
        slugs = [e.slug async for e in aclient.endpoints.list(page_size=1)]
        assert "sdk-one" in slugs
        try:
            await aclient.endpoints.get("no-such-endpoint")
            raise AssertionError("a missing endpoint was found")
        except plinth.NotFound:
            pass
        picks = await aclient.optimize("meta-llama/Llama-3.1-8B-Instruct", gpus=["L40S"])
        assert isinstance(picks, models.OptimizeOut) and picks.ranked


asyncio.run(async_journey())
client.close()
print("journey ok")
