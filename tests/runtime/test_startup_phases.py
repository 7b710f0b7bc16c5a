"""Reading a replica's cold start phase by phase (``runtime.startup``) from what a cluster and
SGLang's log say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runtime import startup

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


SGLANG_LOG = [
    ("[2026-01-01 00:00:00] server_args=ServerArgs(...)", _at(0)),
    ("[2026-01-01 00:00:05] Load weight begin. avail mem=78.50 GB", _at(5)),
    ("Fetching 4 files: 100%|##########| 4/4 [01:02<00:00, 15.2s/it]", _at(67)),
    ("[2026-01-01 00:01:30] Load weight end. elapsed=85.00 s, type=LlamaForCausalLM", _at(90)),
    ("[2026-01-01 00:01:31] Capture cuda graph begin. This can take up to several minutes.", None),
    ("[2026-01-01 00:01:50] Capture cuda graph end. Time elapsed: 19.50 s.", _at(110)),
    ("[2026-01-01 00:01:54] The server is fired up and ready to roll!", _at(114)),
]


def test_sglangs_log_lines_give_download_load_graphs_and_warmup() -> None:
    phases = startup.engine_phases(SGLANG_LOG)
    assert phases.seconds == {
        startup.WEIGHTS_DOWNLOADED: 62.0,
        startup.WEIGHTS_LOADED: 23.0,  # SGLang's figure includes the download
        startup.CUDA_GRAPHS_CAPTURED: 19.5,
        startup.WARMUP: 4.0,
    }
    assert phases.downloaded and phases.reached == startup.WARMUP


def test_only_the_last_run_of_a_restarted_engine_counts() -> None:
    phases = startup.engine_phases([*SGLANG_LOG, *SGLANG_LOG[1:2]])
    assert phases.seconds == {} and phases.reached == "loading"


def test_a_starting_replica_waits_on_the_first_phase_not_reached() -> None:
    assert startup.waiting_on({startup.CREATED: 0}) == startup.SCHEDULED
    scheduled = {startup.CREATED: 0, startup.SCHEDULED: 1}
    assert startup.waiting_on(scheduled) == startup.IMAGE_PULLED
    pulled = {**scheduled, startup.IMAGE_PULLED: 2}
    assert startup.waiting_on(pulled) == startup.WEIGHTS_DOWNLOADED
    assert startup.waiting_on(pulled, startup.WEIGHTS_LOADED) == startup.CUDA_GRAPHS_CAPTURED
    assert startup.waiting_on({**pulled, startup.READY: 9}) == ""


def test_durations_add_up_to_the_whole_start() -> None:
    milestones = {
        startup.CREATED: 0.0,
        startup.SCHEDULED: 2.0,
        startup.IMAGE_PULLED: 32.0,
        startup.WEIGHTS_DOWNLOADED: 40.0,
        startup.READY: 200.0,
    }
    engine = startup.engine_phases(SGLANG_LOG)
    got = startup.durations(milestones, engine)
    assert list(got) == list(startup.PHASES)
    assert got[startup.WEIGHTS_DOWNLOADED] == 8.0 + 62.0
    assert sum(got.values()) == 200.0
    # A cluster that says nothing of the engine: its whole start is the wait for readiness.
    bare = startup.durations({startup.CREATED: 0.0, startup.SCHEDULED: 1.0, startup.READY: 5.0})
    assert bare == {startup.SCHEDULED: 1.0, startup.READY: 4.0}
