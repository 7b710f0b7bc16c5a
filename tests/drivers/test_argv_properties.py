"""Property: no spec that validation accepts puts a foreign flag or a flag-like value on any argv.

Issue 12 item 1. Specs are drawn with hostile strings in every field that reaches an argv (model
source, revision, served name, draft model and revision, InfiniBand device, env, extra flags of the
whole SGLang catalogue with scalar and list values). For each spec `check` accepts, the argv of
`python -m runtime plan`, of the local driver's processes and of the Kubernetes render (after
Kubernetes' own `$(VAR)` expansion) must hold only canonical catalogue flags, each once with as many
values as it takes; engine flags beyond those Plinth sets from typed fields must be allowlisted
extra flags; no denylisted flag may appear (beyond the typed ones); no value may parse as a flag or
hold a control character; and no Secret may be expanded into an argument.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from deployments.drivers.base import RevisionPlan
from deployments.drivers.kube.render import API_KEY_ENV, KubeOptions, render_revision
from deployments.drivers.local.driver import LocalDriver, LocalOptions
from runtime import secret_flags
from runtime.argv import parses_as_flag, unprintable
from runtime.catalog import FlagCatalog, sglang_flags, smg_flags
from runtime.catalog.flags import arity_problem, split_argv
from runtime.extra_flags import EXTRA_FLAG_ALLOWLIST, EXTRA_FLAG_DENYLIST
from runtime.launch import LaunchPlan, cache_aware_args, plan, with_flag
from runtime.routing_key import ROUTING_KEY_HEADER
from runtime.secret_flags import expand
from runtime.spec import RuntimeSpec
from runtime.validate import check, has_errors
from tests.drivers.kubelet import kube_expand
from tests.drivers.reference_specs import ENGINE_KEY, REF

SECRET = "hf_SENTINEL_never_in_argv"
# What the drivers add to a plan's engine argv (local: loopback and a free port; LWS: the group).
DRIVER_ENGINE_FLAGS = {
    "--host", "--port", "--dist-init-addr", "--nnodes", "--node-rank", "--api-key"
}  # fmt: skip
ENGINES = sglang_flags()
ROUTER = smg_flags()

HOSTILE = [
    "--trust-remote-code", "--enable-custom-logit-processor", "-x", "-1", "a\nb", "a\x00b",
    "chat\u202e", "a\rb", "/etc/passwd", "../../etc", "/root/.cache/huggingface/../../etc",
    "s3://bucket/m", "org/name --trust-remote-code", "x=--y", " ", "", "$(HF_TOKEN)",
    "$$(HF_TOKEN)", "$(LWS_LEADER_ADDRESS)",
]  # fmt: skip
hostile = st.sampled_from(HOSTILE) | st.text(max_size=12)
# Ordinary values per field; each spec gets hostile values in one field (or in its extra flags),
# so that a good share of specs is accepted and their argv checked.
ORDINARY = {
    "source": [
        "meta-llama/Llama-3.1-8B-Instruct",
        "org/name",
        "gpt2",
        "/root/.cache/huggingface/m",
    ],
    "revision": ["main", "refs/pr/1", "v1.0", "0123abcd"],
    "served_name": ["chat", "a.b_c-d", "$(HF_TOKEN)", "chat $(HF_TOKEN)", "$$(x)", "x-"],
    "draft_model": ["yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"],
    "draft_model_revision": ["main"],
    "ib_device": ["mlx5_0", "mlx5_0,mlx5_1"],
    "env": ["1", "info", "$(HF_TOKEN)", "-1"],
}
ALL_FLAGS = sorted({spec.flag for spec in ENGINES.flags()} | {"--tp", "-x", "--x=1", "extra"})


@st.composite
def valid_extra_value(draw: st.DrawFn, flag: str) -> Any:
    spec = ENGINES.get(flag)
    assert spec is not None
    if spec.store_true:
        return draw(st.booleans())
    if spec.choices:
        return draw(st.sampled_from(spec.choices))
    if spec.type == "int":
        return draw(st.integers(1, 4096))
    if spec.type == "float":
        return draw(st.floats(0.5, 600))
    return draw(st.sampled_from(["info", "{}", '{"a":1}']))


@st.composite
def extra_flags(draw: st.DrawFn, *, hostile_ones: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for _ in range(draw(st.integers(0, 3))):
        if not hostile_ones:
            flag = draw(st.sampled_from(sorted(EXTRA_FLAG_ALLOWLIST)))
            out[flag] = draw(valid_extra_value(flag))
        else:
            flag = draw(st.sampled_from(ALL_FLAGS))
            scalar = st.booleans() | st.integers(-5, 5000) | st.floats(-1, 1e4) | hostile
            out[flag] = draw(scalar | st.lists(hostile, max_size=3))
    return out


@st.composite
def hostile_specs(draw: st.DrawFn) -> dict[str, Any]:
    """A servable base (8B on one H100) with a hostile string drawn into one argv-bound field."""
    target = draw(st.sampled_from([*ORDINARY, "extra_flags"]))

    def text(field: str) -> str:
        return draw(hostile if field == target else st.sampled_from(ORDINARY[field]))

    model: dict[str, Any] = {"source": text("source"), "trust_remote_code": draw(st.booleans())}
    for field in ("revision", "served_name"):
        if field == target or draw(st.booleans()):
            model[field] = text(field)
    env_names = st.sampled_from(["SGLANG_X", "NCCL_Y", "HF_HOME" if target == "env" else "MC_Z"])
    data: dict[str, Any] = {
        "model": model,
        "hardware": {"gpu": "H100-SXM"},
        "runtime": {
            "extra_flags": draw(extra_flags(hostile_ones=target == "extra_flags")),
            "env": {name: text("env") for name in draw(st.lists(env_names, max_size=2))},
        },
    }
    if target.startswith("draft") or draw(st.booleans()):
        data["speculator"] = {"algorithm": "EAGLE3", "draft_model": text("draft_model")}
        if target == "draft_model_revision" or draw(st.booleans()):
            data["speculator"]["draft_model_revision"] = text("draft_model_revision")
    if target == "ib_device" or draw(st.booleans()):
        data["disaggregation"] = {"enabled": True, "ib_device": text("ib_device")}
    return data


def _assert_safe(role: str, args: list[str], catalog: FlagCatalog) -> list[str]:
    """The flags of `args`, after checking each is canonical, once, with a safe value each."""
    flags = []
    for flag, values in split_argv(args):
        spec = catalog.get(flag)
        assert spec is not None and spec.flag == flag, (role, flag, args)
        assert flag not in flags or spec.kind in {"append", "extend"}, (role, flag, args)
        assert arity_problem(spec, len(values)) is None, (role, flag, values)
        for value in values:
            assert not parses_as_flag(value), (role, flag, value)
            assert unprintable(value) is None, (role, flag, value)
            assert SECRET not in value, (role, flag)
        flags.append(flag)
    return flags


def _assert_engine_flags(spec: RuntimeSpec, flags: list[str], managed: set[str]) -> None:
    extras = set(flags) - managed - DRIVER_ENGINE_FLAGS
    assert extras <= EXTRA_FLAG_ALLOWLIST, extras
    typed = {"--model-path", "--speculative-draft-model-path"}
    if spec.model.trust_remote_code:
        typed.add("--trust-remote-code")
    assert set(flags) & EXTRA_FLAG_DENYLIST.keys() <= typed


def _assert_plan_safe(spec: RuntimeSpec, launch: LaunchPlan, managed: set[str]) -> None:
    for role in launch.roles:
        catalog = ROUTER if role.role == "router" else ENGINES
        flags = _assert_safe(role.role, role.args, catalog)
        if role.role != "router":
            _assert_engine_flags(spec, flags, managed)


def _local_argvs(revision: RevisionPlan) -> Iterator[tuple[str, list[str], FlagCatalog]]:
    """Each process' argv as it reads it: the endpoint's key put in place of its reference
    inside the process (``runtime.secret_flags``), never on the command line itself."""
    driver = LocalDriver(LocalOptions(run_dir=Path("/nonexistent"), smg="smg"))
    keyed = [driver.options.python, "-m", "runtime.secret_flags"]
    environ = {API_KEY_ENV: ENGINE_KEY}
    for role in revision.plan.roles:
        if role.role == "router":
            argv = driver.router_argv(revision, 31000, 31001, ENGINE_KEY)
            assert argv[:5] == [*keyed, "smg", "launch"] and ENGINE_KEY not in argv
            yield role.role, expand(argv[5:], dict(environ)), ROUTER
        else:
            argv = driver.engine_argv(role, 31002, ENGINE_KEY)
            assert argv[:5] == [*keyed, "-m", "runtime.sim"] and ENGINE_KEY not in argv
            yield role.role, expand(argv[5:], dict(environ)), ENGINES


SECRET_FLAGS_SOURCE = Path(secret_flags.__file__).read_text()


def _containers(obj: Any) -> Iterator[dict[str, Any]]:
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "containers":
                yield from value
            else:
                yield from _containers(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _containers(item)


def _kube_argvs(revision: RevisionPlan) -> Iterator[tuple[str, list[str], FlagCatalog]]:
    lws = {"LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1"}
    for obj in render_revision(REF, revision, KubeOptions()):
        for container in _containers(obj):
            # A Secret reference expands to the Secret's value: the endpoint's key, or the token.
            secrets = {API_KEY_ENV: ENGINE_KEY}
            env = {
                e["name"]: e.get("value", secrets.get(e["name"], SECRET))
                for e in container.get("env", [])
            }
            args = [kube_expand(arg, {**lws, **env}) for arg in container["args"]]
            command = [kube_expand(part, {**lws, **env}) for part in container["command"]]
            # What the kubelet starts never holds the key; the process puts it in place itself.
            assert ENGINE_KEY not in command + args
            if command[:3] == ["python3", "-c", SECRET_FLAGS_SOURCE]:
                args = expand(args, dict(secrets))
            router = container["name"] == "router"
            yield container["name"], args, ROUTER if router else ENGINES


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_specs())
def test_no_accepted_spec_smuggles_a_flag_into_any_argv(data: dict[str, Any]) -> None:
    spec, issues = check(data)
    if spec is None or has_errors(issues):
        event("refused")
        assert any(issue.is_error and issue.field for issue in issues)
        return
    event("accepted")
    labels = {"deployment": REF.slug}
    bare = spec.model_copy(update={"runtime": spec.runtime.model_copy(update={"extra_flags": {}})})
    managed = {
        f for role in plan(bare, deployment_labels=labels).roles for f, _ in split_argv(role.args)
    }
    launch = plan(spec, deployment_labels=labels)
    _assert_plan_safe(spec, launch, managed)
    revision = RevisionPlan(number=1, plan=launch, replicas=1, hf_token=SECRET)
    for source in (_local_argvs(revision), _kube_argvs(revision)):
        for role, args, catalog in source:
            flags = _assert_safe(role, args, catalog)
            if catalog is ENGINES:
                _assert_engine_flags(spec, flags, managed)
    # Single-node engines reach Kubernetes exactly as planned, plus the endpoint's key.
    kube = {name: args for name, args, _ in _kube_argvs(revision)}
    engine = launch.roles[0]
    if engine.role == "engine" and not engine.multi_node:
        assert kube["engine"] == with_flag(engine.args, "--api-key", ENGINE_KEY)


def test_the_issue_repro_is_refused_and_a_dollar_reference_stays_literal() -> None:
    repro = {"--reasoning-parser": ["deepseek-r1", "--enable-custom-logit-processor"]}
    spec, issues = check(
        {
            "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "$(HF_TOKEN)"},
            "hardware": {"gpu": "H100-SXM"},
            "runtime": {"extra_flags": repro},
        }
    )
    assert spec is None
    assert [i.field for i in issues] == ["runtime.extra_flags.--reasoning-parser"]
    spec, issues = check(
        {
            "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "$(HF_TOKEN)"},
            "hardware": {"gpu": "H100-SXM"},
        }
    )
    assert spec is not None and not has_errors(issues)
    revision = RevisionPlan(number=1, plan=plan(spec), replicas=1, hf_token=SECRET)
    for name, args, _ in _kube_argvs(revision):
        if name == "engine":
            assert args[args.index("--served-model-name") + 1] == "$(HF_TOKEN)"


def test_both_drivers_start_the_router_with_the_plans_routing_knobs() -> None:
    spec, issues = check(
        {
            "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
            "hardware": {"gpu": "H100-SXM"},
            "routing": {"placement": "first_fit", "warmup_seconds": 45},
        }
    )
    assert spec is not None and not has_errors(issues)
    knobs = cache_aware_args(spec.routing.resolved())
    revision = RevisionPlan(number=1, plan=plan(spec), replicas=1, hf_token=SECRET)
    for source in (_local_argvs(revision), _kube_argvs(revision)):
        (router,) = [args for role, args, _ in source if role == "router"]
        for flag, values in split_argv(knobs):
            assert router[router.index(flag) + 1 : router.index(flag) + 1 + len(values)] == values
        assert router[router.index("--worker-warmup-secs") + 1] == "45"


def test_both_drivers_start_the_router_obeying_the_gateways_placement_by_default() -> None:
    spec, issues = check(
        {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
    )
    assert spec is not None and not has_errors(issues)
    revision = RevisionPlan(number=1, plan=plan(spec), replicas=1, hf_token=SECRET)
    for source in (_local_argvs(revision), _kube_argvs(revision)):
        (router,) = [args for role, args, _ in source if role == "router"]
        assert router[router.index("--policy") + 1] == "consistent_hashing"
        assert router[router.index("--routing-key-headers") + 1] == ROUTING_KEY_HEADER
