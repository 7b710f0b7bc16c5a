"""Issue 18 items 6 and 9 in a real browser, walked as a person would: the logs page's search,
level filter, role picker, follow and download; on a phone, the endpoints table keeps its
Status column in view, and Stop and Roll back ask in the console's own dialog (not the
browser's confirm()), which axe-core finds nothing wrong with."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.browser.conftest import LiveConsole, at_rest
from tests.browser.test_console_journey import answer_dialog, sign_in
from tests.browser.test_console_trust import axe_violations
from tests.conftest import Cast

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
LOG = """\
[2026-01-01 12:00:00] INFO: server started
[2026-01-01 12:00:01] WARNING: KV cache is 95% full
[2026-01-01 12:00:02] ERROR: request 7 failed
[2026-01-01 12:00:03] Prefill batch. #new-seq: 1
"""


def _page(browser: Browser, width: int, height: int) -> Iterator[Page]:
    context = browser.new_context(
        viewport={"width": width, "height": height}, accept_downloads=True
    )
    yield context.new_page()
    context.close()


@pytest.fixture
def desktop(browser: Browser) -> Iterator[Page]:
    yield from _page(browser, 1280, 900)


@pytest.fixture
def phone(browser: Browser) -> Iterator[Page]:
    yield from _page(browser, 390, 844)


def _idle_endpoint(cast: Cast, slug: str, *, revisions: int = 1) -> Deployment:
    """Asked to run but scaled to zero: Stop is offered, and nothing needs to start."""
    actor = cast.actor(cast.alice, cast.acme)
    endpoint = services.create_deployment(actor, slug=slug, name=slug.title(), spec=SPEC)
    services.scale(actor, endpoint.pk, replicas=0)
    for n in range(1, revisions):
        spec = {**SPEC, "batching": {"max_running_requests": 32 * (n + 1)}}
        services.update_settings(actor, endpoint.pk, spec=spec, base_revision=n, message="more")
    at_rest(endpoint.pk)  # the worker is done with it: no engine of the create writes logs
    return endpoint


def test_a_developer_searches_filters_and_follows_a_log(
    desktop: Page, live_console: LiveConsole, cast: Cast
) -> None:
    endpoint = _idle_endpoint(cast, "logged")
    log_dir = Path(live_console.run_dir) / str(endpoint.pk)
    log_dir.mkdir(parents=True, exist_ok=True)
    engine = log_dir / "r1-engine-0.log"
    engine.write_text(LOG)
    (log_dir / "router.log").write_text("2026-01-01 12:00:00  WARN smg: no tokenizer\n")
    page = desktop
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/logged/logs/")
    lines = page.locator("#log-lines .log-line")
    expect(lines).to_have_count(4)
    expect(page.locator("#log-lines .log-error")).to_have_text(re.compile("request 7 failed"))

    page.get_by_label("Level").select_option("WARNING")  # re-renders the card, no reload
    expect(lines).to_have_count(2)
    expect(lines.first).to_contain_text("KV cache is 95% full")
    page.get_by_label("Search the lines").fill("request")  # searched as the person types
    expect(lines).to_have_count(1)
    expect(page.locator("#log-matches")).to_contain_text("1 of the last 4 lines match")
    with page.expect_download() as download:
        page.get_by_role("link", name="Download").click()
    saved = Path(download.value.path()).read_text()
    assert saved == "[2026-01-01 12:00:02] ERROR: request 7 failed\n"

    page.get_by_label("Search the lines").fill("")
    expect(lines).to_have_count(2)
    page.get_by_label("Follow").check()
    expect(page.locator("#log-follow")).to_have_count(1)
    with engine.open("a") as log:
        log.write("[2026-01-01 12:00:04] INFO: fine\n[2026-01-01 12:00:05] ERROR: boom\n")
    expect(lines).to_have_count(3)  # the followed error; the INFO line stays filtered out
    expect(lines.last).to_contain_text("boom")
    page.get_by_label("Follow").uncheck()
    expect(page.locator("#log-follow")).to_have_count(0)  # the card re-rendered, not polling

    page.get_by_label("Role").select_option("router")  # at once: the card re-rendered already
    expect(page.get_by_label("Replica")).to_have_value("router")
    expect(lines).to_have_count(1)
    expect(lines.first).to_contain_text("no tokenizer")
    assert axe_violations(page) == []


def test_on_a_phone_the_endpoint_list_keeps_its_status_in_view(
    phone: Page, live_console: LiveConsole, cast: Cast
) -> None:
    _idle_endpoint(cast, "a-rather-long-endpoint-name")
    page = phone
    sign_in(page, live_console)
    row = page.locator("tr[data-slug=a-rather-long-endpoint-name]")
    badge = row.locator(".badge")
    expect(badge).to_be_visible()
    box = badge.bounding_box()
    assert box is not None and box["x"] + box["width"] <= 390, box  # no sideways scroll
    expect(row.locator(".col-model")).to_be_hidden()  # folded under the name instead
    expect(row.locator(".phone-only")).to_contain_text("Llama-3.1-8B-Instruct")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert axe_violations(page) == []


def test_on_a_phone_stop_asks_in_a_dialog(
    phone: Page, live_console: LiveConsole, cast: Cast
) -> None:
    endpoint = _idle_endpoint(cast, "stoppable")
    page = phone
    asked: list[str] = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/stoppable/")
    page.get_by_role("button", name="Stop", exact=True).click()
    dialog = page.get_by_role("dialog", name="Stop stoppable?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("stops serving")
    box = dialog.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, box
    assert axe_violations(page) == []
    page.keyboard.press("Escape")  # a change of mind: nothing is posted
    expect(dialog).to_be_hidden()
    endpoint.refresh_from_db()
    assert endpoint.desired_state == "running"

    page.get_by_role("button", name="Stop", exact=True).click()
    answer_dialog(page, "Stop")
    expect(page.get_by_role("button", name="Start", exact=True)).to_be_visible()
    endpoint.refresh_from_db()
    assert endpoint.desired_state == "stopped"
    assert asked == []  # the browser's own confirm() never came up


def test_on_a_phone_roll_back_asks_in_a_dialog(
    phone: Page, live_console: LiveConsole, cast: Cast
) -> None:
    endpoint = _idle_endpoint(cast, "rolled", revisions=2)
    page = phone
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/rolled/revisions/")
    page.get_by_role("button", name="Roll back to r1").click()
    dialog = page.get_by_role("dialog", name="Roll back to revision 1?")
    expect(dialog).to_be_visible()
    answer_dialog(page, "Cancel")
    assert endpoint.revisions.count() == 2
    page.get_by_role("button", name="Roll back to r1").click()
    answer_dialog(page, "Roll back to r1")
    expect(page.locator("#revision-3")).to_contain_text("rollback to r1")
