"""The console's logs page: search, level filter and role picker, applied on the server, kept
by the follow poll and the download; each line marked with its level for the eye."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from deployments.endpoints.models import Deployment

HTMX = {"HTTP_HX_REQUEST": "true"}
LOG = """\
[2026-01-01 12:00:00] INFO: server started
[2026-01-01 12:00:01] WARNING: KV cache is 95% full
[2026-01-01 12:00:02] ERROR: request 7 failed
  retrying on another replica
[2026-01-01 12:00:03] decode batch done
"""


@pytest.fixture
def run_dir(endpoint: Deployment, settings: Any, tmp_path: Path) -> Path:
    settings.PLINTH_LOCAL_RUN_DIR = tmp_path
    root = tmp_path / str(endpoint.pk)
    root.mkdir()
    (root / "r1-engine-0.log").write_text(LOG)
    (root / "router.log").write_text("2026-01-01 12:00:00  WARN smg: no tokenizer\n")
    return root


def lines_of(page: str) -> list[str]:
    pane = page.split('id="log-lines"', 1)[1].split("</pre>", 1)[0]
    spans = pane.split("<span class=")[1:]
    return [part.split(">", 1)[1].split("</span>", 1)[0].strip() for part in spans]


def test_the_level_filter_and_search_narrow_the_lines(alice: Client, run_dir: Path) -> None:
    page = alice.get("/endpoints/chat/logs/?level=WARNING").content.decode()
    assert lines_of(page) == [
        "[2026-01-01 12:00:01] WARNING: KV cache is 95% full",
        "[2026-01-01 12:00:02] ERROR: request 7 failed",
        "retrying on another replica",  # no time, no level: the error's continuation
    ]
    assert '<option value="WARNING" selected>' in page
    assert "3 of the last 5 lines match at WARNING or above" in page
    searched = alice.get("/endpoints/chat/logs/?q=kv+cache", **HTMX).content.decode()
    assert lines_of(searched) == ["[2026-01-01 12:00:01] WARNING: KV cache is 95% full"]
    assert 'value="kv cache"' in searched
    none = alice.get("/endpoints/chat/logs/?q=nothing-like-this").content.decode()
    assert "No line matches." in none


def test_lines_are_marked_with_their_level(alice: Client, run_dir: Path) -> None:
    page = alice.get("/endpoints/chat/logs/").content.decode()
    assert '<span class="log-line log-warning">[2026-01-01 12:00:01] WARNING' in page
    assert '<span class="log-line log-error">[2026-01-01 12:00:02] ERROR' in page
    assert '<span class="log-line">[2026-01-01 12:00:00] INFO' in page


def test_the_role_picker_lists_the_replicas_of_that_role(alice: Client, run_dir: Path) -> None:
    page = alice.get("/endpoints/chat/logs/").content.decode()
    roles = page.split('id="log-role"', 1)[1].split("</select>", 1)[0]
    assert 'value="engine"' in roles and 'value="router"' in roles
    router = alice.get("/endpoints/chat/logs/?role=router&replica=r1-engine-0").content.decode()
    # The named engine is not a router: the first router's log is shown, and the replica menu
    # offers routers only.
    assert lines_of(router) == ["2026-01-01 12:00:00  WARN smg: no tokenizer"]
    menu = router.split('id="replica"', 1)[1].split("</select>", 1)[0]
    assert "r1-engine-0" not in menu and 'value="router" selected' in menu


def test_follow_and_download_keep_the_filters(alice: Client, run_dir: Path) -> None:
    page = alice.get("/endpoints/chat/logs/?follow=1&level=ERROR").content.decode()
    poll_url = page.split('id="log-follow" hx-get="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    assert "level=ERROR" in poll_url
    with (run_dir / "r1-engine-0.log").open("a") as log:
        log.write("[2026-01-01 12:00:04] INFO: fine\n[2026-01-01 12:00:05] ERROR: boom\n")
    poll = alice.get(poll_url, **HTMX).content.decode()
    assert "boom" in poll and "fine" not in poll
    download = alice.get("/endpoints/chat/logs/download/?q=request").content.decode()
    assert download == "[2026-01-01 12:00:02] ERROR: request 7 failed\n"


def test_unknown_filter_values_fall_back_to_none(alice: Client, run_dir: Path) -> None:
    page = alice.get("/endpoints/chat/logs/?level=LOUD&role=chef&q=" + "x" * 500)
    assert page.status_code == 200
    assert "No line matches." in page.content.decode()  # the search, cut to 200 characters
