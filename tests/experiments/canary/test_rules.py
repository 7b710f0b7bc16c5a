"""The pure parts: the abort verdict, the gateway's split, and a conversation's key."""

from __future__ import annotations

import itertools

from deployments.experiments.canary.rules import (
    SideFigures,
    Thresholds,
    judge,
    side_figures,
    weighted_p90,
)
from gateway.routes import CanaryRoute, Endpoint
from gateway.split import Splitter, pin_of, session_of, sticky_point

LIMITS = Thresholds(min_requests=20)
BASE = SideFigures(requests=200, errors=2, ttft_p90=0.100, itl_p90=0.020)


def test_a_canary_within_every_threshold_holds() -> None:
    same = SideFigures(requests=50, errors=1, ttft_p90=0.120, itl_p90=0.024)
    verdict = judge(same, BASE, LIMITS)
    assert not verdict.abort and verdict.reasons == ()


def test_a_slow_canary_is_aborted_with_its_numbers() -> None:
    slow = SideFigures(requests=50, errors=0, ttft_p90=0.100, itl_p90=0.060)
    verdict = judge(slow, BASE, LIMITS)
    assert verdict.abort
    assert verdict.message == "ITL p90 60.0 ms vs 20.0 ms (3.00x > 1.50x)"


def test_an_erring_canary_is_aborted_on_the_error_rate_delta() -> None:
    erring = SideFigures(requests=50, errors=10, ttft_p90=0.1, itl_p90=0.02)
    verdict = judge(erring, BASE, LIMITS)
    assert verdict.abort and verdict.reasons[0].startswith("error rate 20.0% vs 1.0% (+19.0 points")


def test_too_few_requests_are_not_judged() -> None:
    awful = SideFigures(requests=5, errors=5, ttft_p90=9.0, itl_p90=9.0)
    assert not judge(awful, BASE, LIMITS).abort


def test_window_latency_is_the_request_weighted_mean_of_sample_p90s() -> None:
    assert weighted_p90([(10, 0.1), (30, 0.2), (0, 5.0), (5, None)]) == 0.175
    samples = [{"3": {"requests": 10, "ttft_p90": 0.1, "itl_p90": 0.01}}, {"2": {"requests": 4}}]
    side = side_figures(3, samples, {"requests": 12, "errors": 3})
    assert (side.requests, side.error_rate, side.ttft_p90, side.itl_p90) == (12, 0.25, 0.1, 0.01)


def _endpoint(weight: int, sticky: bool = False, ready: int = 1) -> Endpoint:
    canary = CanaryRoute(revision=2, router_url="http://canary", weight=weight, sticky=sticky,
                         ready_replicas=ready)  # fmt: skip
    return Endpoint(id="e1", slug="chat", organization_id="o", status="active",
                    desired_state="running", ready_replicas=1, router_url="http://main",
                    revision=1, canary=canary)  # fmt: skip


def test_the_weighted_split_is_exact_per_hundred_requests() -> None:
    splitter = Splitter()
    for weight in (1, 20, 33, 50):
        endpoint = _endpoint(weight)
        picks = [splitter.pick(endpoint)[1] for _ in range(1000)]
        assert picks.count(2) == weight * 10
        # Spread, not bunched: no two canary requests in a row below half the traffic.
        assert all(not (a == b == 2) for a, b in itertools.pairwise(picks))


def test_a_canary_not_ready_takes_nothing() -> None:
    endpoint = _endpoint(50, ready=0)
    assert {Splitter().pick(endpoint)[0] for _ in range(10)} == {"http://main"}


def test_sticky_sends_one_conversation_to_one_revision() -> None:
    splitter, endpoint = Splitter(), _endpoint(30, sticky=True)
    for n in range(200):
        session = f"conversation-{n}".encode()
        picks = {splitter.pick(endpoint, session)[1] for _ in range(5)}
        assert picks == {2 if sticky_point(session) < 30 else 1}


def test_a_conversation_is_named_by_header_user_or_first_message() -> None:
    chat = {
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x"}]
    }
    turn2 = {"messages": [*chat["messages"], {"role": "assistant", "content": "y"}]}
    assert session_of(None, chat) == session_of(None, turn2) != b""
    assert session_of(b"abc", chat) == b"abc"
    assert session_of(None, {**chat, "user": "u1"}) == b"user:u1"
    assert session_of(None, {"prompt": "p" * 1000}) == b"prompt:" + b"p" * 256
    assert session_of(None, {"max_tokens": 1}) == b""


def test_a_pin_chooses_either_revision_and_a_stray_pin_is_split_as_usual() -> None:
    splitter, endpoint = Splitter(), _endpoint(1)
    assert {splitter.pick(endpoint, pin=2)[1] for _ in range(50)} == {2}
    assert {splitter.pick(endpoint, pin=1)[1] for _ in range(50)} == {1}
    stray = [splitter.pick(endpoint, pin=7)[1] for _ in range(100)]
    assert stray.count(2) == 1
    assert {Splitter().pick(_endpoint(50, ready=0), pin=2)[1] for _ in range(5)} == {1}
    assert (pin_of(b"2"), pin_of(b"-1"), pin_of(b"x"), pin_of(None)) == (2, None, None, None)


def test_a_request_for_an_adapter_the_canary_lacks_goes_to_the_serving_revision() -> None:
    """The serving revision serves legal and sql, the canary legal only: a request for sql is
    one the canary's engines would refuse, so the serving revision answers it, pinned or not;
    the canary's share is of the requests it can answer."""
    canary = CanaryRoute(revision=2, router_url="http://canary", weight=50, sticky=False,
                         ready_replicas=1, adapters=frozenset({"legal"}))  # fmt: skip
    endpoint = Endpoint(id="e1", slug="chat", organization_id="o", status="active",
                        desired_state="running", ready_replicas=1, router_url="http://main",
                        revision=1, canary=canary, served_name="chat",
                        adapters=frozenset({"legal", "sql"}))  # fmt: skip
    splitter = Splitter()
    assert {splitter.pick(endpoint, adapter="sql")[1] for _ in range(20)} == {1}
    assert splitter.pick(endpoint, pin=2, adapter="sql")[1] == 1
    for adapter in ("legal", ""):  # the base model too
        assert [splitter.pick(endpoint, adapter=adapter)[1] for _ in range(4)].count(2) == 2
    assert splitter.pick(endpoint, pin=2, adapter="legal")[1] == 2
