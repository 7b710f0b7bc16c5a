"""The runtime issue's reference specs (tests/runtime/golden/*.yaml) as RevisionPlans."""

from __future__ import annotations

from pathlib import Path

import yaml

from deployments.drivers.base import DeploymentRef, RevisionPlan
from runtime import launch, validate
from runtime.spec import RuntimeSpec

GOLDEN = Path(__file__).resolve().parent.parent / "runtime" / "golden"
# The endpoint's engine key, as controlplane.crypto.engine_api_key derives one.
ENGINE_KEY = "pek_" + "5e" * 32
REF = DeploymentRef(
    id="0b6f8a2e-4c1d-4e8f-9a7b-2d3c4e5f6a7b", slug="chat", namespace="team-a", api_key=ENGINE_KEY
)


def golden_names() -> list[str]:
    return sorted(p.stem for p in GOLDEN.glob("*.yaml"))


def load_spec(name: str) -> RuntimeSpec:
    return RuntimeSpec.model_validate(yaml.safe_load((GOLDEN / f"{name}.yaml").read_text()))


def deployable(name: str) -> bool:
    return not validate.has_errors(validate.validate(load_spec(name)))


def revision_plan(spec: RuntimeSpec, number: int = 1, hf_token: str | None = None) -> RevisionPlan:
    plan = launch.plan(spec, deployment_labels={"deployment": REF.slug})
    engine = next(r for r in plan.roles if r.role != "router")
    return RevisionPlan.for_spec(
        spec, plan, number=number, replicas=engine.replicas, hf_token=hf_token
    )
