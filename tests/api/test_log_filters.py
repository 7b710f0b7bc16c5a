"""The logs API's search (``q``) and level filter: applied on the server to the lines read,
each line labelled with the level its text (or a line before it) names, bad values refused by
name; a follower filtering by level still moves on past the lines it did not keep."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from deployments.endpoints.models import Deployment
from tests.api.conftest import Clients, fields_of

LOG = """\
[2026-01-01 12:00:00] INFO: server started
INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK
[2026-01-01 12:00:01] Prefill batch. #new-seq: 1
[2026-01-01 12:00:02] WARNING: KV cache is 95% full
[2026-01-01 12:00:03] ERROR: request 7 failed
Traceback (most recent call last):
  File "engine.py", line 3, in step
ValueError: bad token
[2026-01-01 12:00:04] INFO: the error above was retried
"""


@pytest.fixture
def run_dir(endpoint: Deployment, settings: Any, tmp_path: Path) -> Path:
    settings.PLINTH_LOCAL_RUN_DIR = str(tmp_path)
    root = tmp_path / str(endpoint.pk)
    root.mkdir()
    (root / "r1-engine-0.log").write_text(LOG)
    return root


def texts(body: dict[str, Any]) -> list[str]:
    return [line["text"] for line in body["lines"]]


def test_each_line_carries_its_level(api: Clients, endpoint: Deployment, run_dir: Path) -> None:
    body = api.dave.get("deployments/chat/logs").json()
    assert [line["level"] for line in body["lines"]] == [
        "INFO", "INFO", "",  # SGLang's ordinary lines name no level (counted as INFO)
        "WARNING", "ERROR", "ERROR", "ERROR", "ERROR",  # a traceback's frames are an error's
        "INFO",
    ]  # fmt: skip
    assert body["read"] == 9


def test_the_level_filter_keeps_that_level_and_worse(
    api: Clients, endpoint: Deployment, run_dir: Path
) -> None:
    warnings = api.dave.get("deployments/chat/logs?level=WARNING").json()
    assert texts(warnings)[0] == "[2026-01-01 12:00:02] WARNING: KV cache is 95% full"
    assert len(texts(warnings)) == 5 and warnings["read"] == 9
    errors = api.dave.get("deployments/chat/logs?level=ERROR").json()
    assert texts(errors)[-1] == "ValueError: bad token"
    # "error" later in an INFO line's message does not make it an ERROR line.
    assert all("retried" not in text for text in texts(errors))


def test_the_search_matches_any_case_within_the_lines_read(
    api: Clients, endpoint: Deployment, run_dir: Path
) -> None:
    found = api.dave.get("deployments/chat/logs?q=" + quote("kv CACHE")).json()
    assert texts(found) == ["[2026-01-01 12:00:02] WARNING: KV cache is 95% full"]
    both = api.dave.get("deployments/chat/logs?level=INFO&q=error").json()
    assert texts(both) == [
        "[2026-01-01 12:00:03] ERROR: request 7 failed",
        "ValueError: bad token",
        "[2026-01-01 12:00:04] INFO: the error above was retried",
    ]
    tail = api.dave.get("deployments/chat/logs?tail=2&q=server").json()
    assert texts(tail) == [] and tail["read"] == 2  # only the last two lines were searched


def test_a_filtered_follower_moves_past_the_lines_it_skips(
    api: Clients, endpoint: Deployment, run_dir: Path
) -> None:
    first = api.dave.get("deployments/chat/logs?level=ERROR").json()
    with (run_dir / "r1-engine-0.log").open("a") as log:
        log.write("[2026-01-01 12:00:05] INFO: fine\n[2026-01-01 12:00:06] ERROR: boom\n")
    after = quote(first["cursor"])
    followed = api.dave.get(f"deployments/chat/logs?level=ERROR&after={after}").json()
    assert texts(followed) == ["[2026-01-01 12:00:06] ERROR: boom"]
    assert followed["continued"] is True and followed["read"] == 2
    again = api.dave.get(f"deployments/chat/logs?level=ERROR&after={quote(followed['cursor'])}")
    assert texts(again.json()) == []


@pytest.mark.parametrize(
    ("query", "field"), [("level=LOUD", "level"), ("level=info", "level"), ("q=" + "x" * 201, "q")]
)
def test_bad_filters_are_refused_by_name(
    api: Clients, endpoint: Deployment, run_dir: Path, query: str, field: str
) -> None:
    response = api.dave.get(f"deployments/chat/logs?{query}")
    assert response.status_code == 422, response.content
    assert fields_of(response) == [field]
