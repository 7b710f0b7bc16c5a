"""The optimizer's top picks are specs that deploy: each becomes active on the local cluster.

Three profiles with different picks: an aggregated FP8 engine, a prefill/decode split with a
speculator, and a mixture-of-experts model on long shared-prefix prompts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.endpoints import services
from deployments.status import ACTIVE
from runtime.optimize import OptimizeRequest, Slo, Traffic, optimize
from tests.conftest import Cast
from tests.endpoints.test_reconcile_local import chat, converge

PROFILES = {
    # Short chat on one GPU type: an aggregated FP8 engine.
    "aggregated": OptimizeRequest(
        model="meta-llama/Llama-3.1-8B-Instruct",
        gpus=("H100-SXM",),
        traffic=Traffic(input_tokens=1024, output_tokens=256, rate_rps=20),
        slo=Slo(ttft_p90_s=1.0, itl_p90_s=0.05),
    ),
    # Long multi-turn prompts under a tight ITL: prefill/decode split with an EAGLE-3 draft.
    "disaggregated": OptimizeRequest(
        model="llama-3.1-70b",
        gpus=("H100-SXM",),
        traffic=Traffic(input_tokens=4000, output_tokens=300, rate_rps=5, turns=3),
        slo=Slo(ttft_p90_s=1.5, itl_p90_s=0.03),
    ),
    # A mixture-of-experts model on long prompts that share most of their prefix (a RAG
    # template): whichever layout wins, its experts and KV cache must come up.
    "moe-long-prompt": OptimizeRequest(
        model="gpt-oss-120b",
        gpus=("H100-SXM",),
        traffic=Traffic(input_tokens=8000, output_tokens=400, rate_rps=2, prefix_share=0.6),
        slo=Slo(ttft_p90_s=2.0, itl_p90_s=0.04),
    ),
}

# Where the layout is the point of the profile: whether its pick splits prefill from decode.
SPLIT = {"aggregated": False, "disaggregated": True}


@pytest.mark.django_db
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_top_pick_becomes_active(
    cast: Cast, fast_local: Path, settings: object, profile: str
) -> None:
    settings.PLINTH_STARTUP_WINDOW_S = 30  # type: ignore[attr-defined]
    result = optimize(PROFILES[profile])
    assert result.best is not None
    if profile in SPLIT:
        assert result.best.spec.disaggregation.enabled == SPLIT[profile]
    spec = result.best.spec.model_dump(mode="json", exclude_defaults=True)
    spec["model"]["served_name"] = "chat"  # what `chat()` asks for
    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="picked", name="Picked", spec=spec)
    deployment = converge(deployment, ACTIVE)
    assert chat(deployment) == 200
