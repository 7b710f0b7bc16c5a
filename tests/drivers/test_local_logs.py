"""The local driver's logs: process log files read as a tail or after a cursor, with the times
their lines carry, picked by replica and role, never through a link."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from deployments.drivers import base
from deployments.drivers.local.driver import LocalDriver, LocalOptions
from deployments.drivers.local.logfile import line_time, read_log

REF = base.DeploymentRef(id="5f0c8e0a-0000-4000-8000-000000000002", slug="local-chat")


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    (tmp_path / REF.id).mkdir()
    return tmp_path


@pytest.fixture
def driver(run_dir: Path) -> LocalDriver:
    return LocalDriver(LocalOptions(run_dir=run_dir))


def write(run_dir: Path, name: str, text: str, mode: str = "w") -> Path:
    path = run_dir / REF.id / f"{name}.log"
    with path.open(mode) as handle:
        handle.write(text)
    return path


def texts(found: base.LogLines) -> list[str]:
    return [line.text for line in found.lines]


def test_a_tail_is_the_last_whole_lines_and_a_cursor_continues_after_them(
    driver: LocalDriver, run_dir: Path
) -> None:
    write(run_dir, "r1-engine-0", "".join(f"line {i}\n" for i in range(10)) + "half a li")
    first = driver.logs(REF, base.LogQuery(tail=3))
    assert texts(first) == ["line 7", "line 8", "line 9"]  # the unfinished line waits
    assert first.replica == "r1-engine-0" and not first.continued

    nothing_new = driver.logs(REF, base.LogQuery(tail=3, after=first.cursor))
    assert nothing_new.lines == [] and nothing_new.continued and not nothing_new.more
    assert nothing_new.cursor == first.cursor

    write(run_dir, "r1-engine-0", "ne\nline 11\nline 12\nline 13\n", mode="a")
    following = driver.logs(REF, base.LogQuery(tail=2, after=first.cursor))
    # Oldest first, at most ``tail``, and ``more`` says the rest is waiting: nothing is skipped.
    assert texts(following) == ["half a line", "line 11"]
    assert following.continued and following.more
    rest = driver.logs(REF, base.LogQuery(tail=2, after=following.cursor))
    assert texts(rest) == ["line 12", "line 13"] and not rest.more


def test_a_cursor_of_a_replaced_file_gives_a_fresh_tail(driver: LocalDriver, run_dir: Path) -> None:
    path = write(run_dir, "r1-engine-0", "old 1\nold 2\n")
    cursor = driver.logs(REF, base.LogQuery()).cursor
    replacement = path.with_suffix(".new")
    replacement.write_text("new 1\n")
    replacement.replace(path)  # another inode: the cursor's offset means nothing here
    found = driver.logs(REF, base.LogQuery(after=cursor))
    assert texts(found) == ["new 1"] and not found.continued
    past_the_end = f"{os.stat(path).st_ino}:9999:00000000"  # truncated since
    assert texts(driver.logs(REF, base.LogQuery(after=past_the_end))) == ["new 1"]
    # Removed and written again: the same inode may come back, the same first bytes do not.
    cursor = driver.logs(REF, base.LogQuery()).cursor
    path.unlink()
    path.write_text("new 2\n")
    assert not driver.logs(REF, base.LogQuery(after=cursor)).continued


def test_lines_carry_the_times_the_process_stamped(driver: LocalDriver, run_dir: Path) -> None:
    write(
        run_dir,
        "r1-engine-0",
        "unstamped preamble\n"
        "[2025-06-01 12:00:00] Load weight begin\n"
        "Traceback (most recent call last):\n"  # a continuation: the line above's time
        "[2025-06-01 12:00:05 TP0] Load weight end\n"
        "2025-06-02T10:00:09.5Z  INFO smg: router up\n",  # a day later whatever the zone
    )
    found = driver.logs(REF, base.LogQuery())
    local = datetime(2025, 6, 1, 12, 0, 0).astimezone()  # SGLang stamps local time
    assert [line.ts for line in found.lines] == [
        None,
        local,
        local,
        local + timedelta(seconds=5),
        datetime(2025, 6, 2, 10, 0, 9, 500000, tzinfo=UTC),
    ]
    since = driver.logs(REF, base.LogQuery(since=local + timedelta(seconds=1)))
    assert texts(since) == ["[2025-06-01 12:00:05 TP0] Load weight end", found.lines[-1].text]


def test_stamps_are_read_only_where_they_are_times() -> None:
    assert line_time("2025-13-01 12:00:00 not a month") is None
    assert (
        line_time("[2025-06-01 12:00:00.123] x")
        == datetime(2025, 6, 1, 12, 0, 0, 123000).astimezone()
    )
    assert line_time("2025-06-01T12:00:00+02:00 x") == datetime(2025, 6, 1, 10, tzinfo=UTC)
    assert line_time("2025-06-01T12:00:00+02:00 x", UTC) == datetime(2025, 6, 1, 10, tzinfo=UTC)
    assert line_time("2025-06-01 12:00:00 x", UTC) == datetime(2025, 6, 1, 12, tzinfo=UTC)
    assert line_time("id 2025-06-01 12:00:00") is None  # not at the start


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process' local time 5:30 ahead of UTC, so a stamp read in the wrong zone shows."""
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


# As smg 1.13 writes its log into a file: every part coloured or dimmed, the time in UTC (it
# ignores TZ) with no zone named. After the driver's own line for the start of the run.
ROUTER_LOG = (
    "2026-12-04T21:35:08+00:00 --- starting router: smg launch --api-key ***\n"
    "\x1b[2m2026-12-04 21:35:09\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2msmg::server\x1b[0m"
    "\x1b[2m:\x1b[0m Starting router on 127.0.0.1:39871\n"
    "  policy: CacheAware\n"
    "\x1b[2m2026-12-04 21:35:11\x1b[0m \x1b[33m WARN\x1b[0m \x1b[2msmg::auth\x1b[0m\x1b[2m:\x1b[0m "
    "key \x1b[3mapi_key\x1b[0m\x1b[2m=\x1b[0msk-live-1 \x1b]8;;http://x\x1b\\docs\x1b]8;;\x1b\\\n"
)
# SGLang's and the simulator's stamps are local time; a progress bar redraws after each \r.
ENGINE_LOG = (
    "[2026-12-04 21:35:09] \x1b[1mLoad weight begin\x1b[0m\n"
    "Loading shards:   0% | 0/4 [00:00<?]\rLoading shards: 100% | 4/4 [00:03<00:00]\n"
    "Capturing batches (bs=8 avail_mem=40 GB)\r\x1b[KCaptured\n"  # erased, then redrawn
    "[2026-12-04 21:35:14 TP0] Load weight end\n"
)


def test_coloured_lines_come_back_plain_at_the_times_they_carry(
    driver: LocalDriver, run_dir: Path, far_from_utc: None
) -> None:
    write(run_dir, "router", ROUTER_LOG)
    write(run_dir, "r1-engine-0", ENGINE_LOG)
    router = driver.logs(REF, base.LogQuery(replica="router")).lines
    assert [line.text for line in router] == [
        "2026-12-04T21:35:08+00:00 --- starting router: smg launch --api-key ***",
        "2026-12-04 21:35:09  INFO smg::server: Starting router on 127.0.0.1:39871",
        "  policy: CacheAware",  # a continuation: the line above's time
        "2026-12-04 21:35:11  WARN smg::auth: key api_key=*** docs",
    ]
    utc = datetime(2026, 12, 4, 21, 35, tzinfo=UTC)
    seconds = [8, 9, 9, 11]
    assert [line.ts for line in router] == [utc + timedelta(seconds=s) for s in seconds]
    engine = driver.logs(REF, base.LogQuery(replica="r1-engine-0")).lines
    assert [line.text for line in engine] == [
        "[2026-12-04 21:35:09] Load weight begin",
        "Loading shards: 100% | 4/4 [00:03<00:00]",
        "Captured",
        "[2026-12-04 21:35:14 TP0] Load weight end",
    ]
    ist = datetime(2026, 12, 4, 16, 5, tzinfo=UTC)  # 21:35 in Kolkata
    assert [line.ts for line in engine] == [ist + timedelta(seconds=s) for s in (9, 9, 9, 14)]
    # What was read plain is what ``since`` filters and a follower continues from.
    since = driver.logs(REF, base.LogQuery(replica="router", since=utc + timedelta(seconds=10)))
    assert [line.text for line in since.lines] == [router[-1].text]


def test_replicas_are_picked_by_name_and_role_and_never_by_path(
    driver: LocalDriver, run_dir: Path
) -> None:
    write(run_dir, "r2-prefill-0", "prefill\n")
    write(run_dir, "r2-decode-0", "decode\n")
    write(run_dir, "router", "router --api-key sk-secret-value up\n")
    found = driver.logs(REF, base.LogQuery(role="decode"))
    assert found.replica == "r2-decode-0" and texts(found) == ["decode"]
    assert {(s.name, s.role) for s in found.replicas} == {
        ("r2-prefill-0", "prefill"),
        ("r2-decode-0", "decode"),
        ("router", "router"),
    }
    assert texts(driver.logs(REF, base.LogQuery(replica="router"))) == ["router --api-key *** up"]
    # A name that is not listed reads nothing; with fallback, the first (of the role).
    for name in ("../../etc/passwd", "r2-prefill-0/../router", "r2-prefill-0"):
        missing = driver.logs(REF, base.LogQuery(replica=name, role="decode"))
        assert missing.replica == "" and missing.lines == []
    fallback = driver.logs(REF, base.LogQuery(replica="gone", role="prefill", fallback=True))
    assert fallback.replica == "r2-prefill-0"


def test_a_link_is_neither_listed_nor_followed(driver: LocalDriver, run_dir: Path) -> None:
    outside = run_dir / "someone-elses.log"
    outside.write_text("not yours\n")
    os.symlink(outside, run_dir / REF.id / "r1-engine-0.log")
    assert driver.logs(REF, base.LogQuery()).replicas == ()
    with pytest.raises(OSError):
        read_log(run_dir / REF.id / "r1-engine-0.log", tail=5, after=None, since=None, max_bytes=99)


def test_a_huge_log_is_read_from_its_end_only(run_dir: Path) -> None:
    path = write(run_dir, "r1-engine-0", "x" * 10_000 + "\n" + "".join(f"{i}\n" for i in range(50)))
    found = read_log(path, tail=1000, after=None, since=None, max_bytes=100)
    # The first line read is a fragment of a longer one: dropped, not shown cut.
    assert [text for text, _ in found.lines] == [str(i) for i in range(50)][-len(found.lines) :]
    assert len(found.lines) < 50
    beginning = f"{os.stat(path).st_ino}:0:{0:08x}"  # the checksum of no bytes
    start = read_log(path, tail=1000, after=beginning, since=None, max_bytes=100)
    assert start.lines == [("x" * 100, None)] and start.more  # one line longer than a read
