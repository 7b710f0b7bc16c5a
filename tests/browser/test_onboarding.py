"""A new user's first answer, in a real browser against a live console, a Celery worker and the
local cluster (simulated engines and the smg router as real processes): from the empty endpoint
list, through a template, the endpoint coming up, a key made for it and copied, to a streamed
answer in the playground, in at most five clicks and one key copy (counted in the page as well
as here). Then the playground as a developer uses it: a multi-turn chat with a system prompt and
sampling settings, per-message figures, "View code", and two endpoints side by side. axe-core
checks each state the user passes through, at desktop and phone widths.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.browser.conftest import LiveConsole
from tests.browser.test_console_journey import (
    COME_UP_MS,
    STYLE_PROBE,
    shoot,
    sign_in,
)
from tests.browser.test_console_trust import WIDTHS, axe_violations
from tests.conftest import Cast

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
MAX_CLICKS = 5
MAX_COPIES = 1
REPLY_MS = 60_000

# Counted in the page too, so no click the test makes slips past the helper below: every
# trusted click lands in sessionStorage (it survives the navigations between pages); a click on
# a copy button counts as the key copy instead.
COUNT_CLICKS = """
document.addEventListener("click", (event) => {
  if (!event.isTrusted) return;
  const copy = event.target instanceof Element && event.target.closest("[data-copy]");
  const slot = copy ? "plinth.copies" : "plinth.clicks";
  sessionStorage.setItem(slot, String(Number(sessionStorage.getItem(slot) || 0) + 1));
}, true);
"""


class Clicks:
    """The user's clicks and key copies, as the test makes them."""

    def __init__(self) -> None:
        self.clicks: list[str] = []
        self.copies: list[str] = []

    def click(self, target: Locator, what: str) -> None:
        target.click()
        self.clicks.append(what)

    def copy(self, target: Locator, what: str) -> None:
        target.click()
        self.copies.append(what)


def in_page(page: Page) -> tuple[int, int]:
    counted = page.evaluate(
        "[sessionStorage.getItem('plinth.clicks'), sessionStorage.getItem('plinth.copies')]"
    )
    return int(counted[0] or 0), int(counted[1] or 0)


def axe_at_every_width(page: Page, state: str) -> None:
    """axe-core on the page as it is now, at each width (resizing clicks nothing); nothing is
    wider than the screen either."""
    found = {}
    for width, height in WIDTHS:
        page.set_viewport_size({"width": width, "height": height})
        found[width] = axe_violations(page)
        overflow = page.evaluate(STYLE_PROBE)["overflow"]
        assert overflow <= 0, f"{state} at {width}px is {overflow}px wider than the screen"
        shoot(page, f"onboarding-{state}-{width}")
    page.set_viewport_size({"width": WIDTHS[0][0], "height": WIDTHS[0][1]})
    assert found == {w: [] for w, _ in WIDTHS}, state


@pytest.fixture
def counted(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context(
        viewport={"width": WIDTHS[0][0], "height": WIDTHS[0][1]},
        permissions=["clipboard-read", "clipboard-write"],
    )
    context.add_init_script(COUNT_CLICKS)
    yield context
    context.close()


def test_a_new_user_gets_a_streamed_answer_in_five_clicks_and_one_key_copy(
    counted: BrowserContext, live_console: LiveConsole, cast: Cast
) -> None:
    page = counted.new_page()
    sign_in(page, live_console)
    page.evaluate("sessionStorage.clear()")  # signing in is not part of the count
    user = Clicks()

    # The empty state: three steps, and the wizard's templates one click away.
    onboarding = page.locator("#onboarding")
    expect(onboarding).to_contain_text("Create an endpoint")
    expect(onboarding).to_contain_text("Make a key")
    expect(onboarding).to_contain_text("Call it")
    axe_at_every_width(page, "empty")
    user.click(onboarding.get_by_role("link", name=re.compile("Chat, latency first")), "template")
    expect(page.locator("#template-chosen")).to_be_visible()
    user.click(page.locator("#save"), "create")
    expect(page).to_have_url(re.compile("/endpoints/chat/$"))

    # Once active, the endpoint page offers its URL, a snippet and a key for it, live.
    card = page.locator("#first-call")
    try:
        expect(card).to_contain_text("is live", timeout=COME_UP_MS)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{live_console.diagnostics()}") from exc
    expect(card.locator("#first-call-url")).to_have_value(re.compile("/endpoints/chat/v1$"))
    axe_at_every_width(page, "first-call")
    user.click(card.get_by_role("button", name="Create a key for chat"), "key")

    # The key, once, inside snippets for the endpoint; copied with one click.
    shown = page.locator("#created-key")
    expect(shown).to_have_value(re.compile(r"^pli_"))
    key = shown.input_value()
    snippets = page.locator('[data-snippets-for="chat"]')
    expect(snippets.locator("pre").first).to_contain_text(f"Bearer {key}")
    axe_at_every_width(page, "key")
    user.copy(page.locator("#copy-key"), "key")
    expect(page.locator("#copy-key")).to_have_attribute("data-copied", "true")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied == key

    user.click(snippets.get_by_role("link", name="Try it in the playground"), "playground")
    expect(page).to_have_url(re.compile("/endpoints/chat/#playground$"))
    page.fill("#playground-key", copied)  # pasted: typing, not a click
    user.click(page.locator("#playground-send"), "send")
    output = page.locator("#playground-output")
    expect(output).to_have_attribute("data-done", "true", timeout=REPLY_MS)
    expect(page.locator("#playground-error")).to_be_empty()
    assert output.locator(".msg-assistant .msg-text").inner_text().strip()
    expect(page.locator("#stat-ttft")).to_contain_text("ms")
    axe_at_every_width(page, "first-answer")

    assert len(user.clicks) <= MAX_CLICKS and len(user.copies) <= MAX_COPIES, user.clicks
    assert in_page(page) == (len(user.clicks), len(user.copies))


def _running(cast: Cast, slug: str) -> Deployment:
    actor = cast.actor(cast.alice, cast.acme)
    return services.create_deployment(actor, slug=slug, name=slug.title(), spec=SPEC)


def _wait_active(page: Page, console: LiveConsole, slug: str) -> None:
    page.goto(f"{console.url}/endpoints/{slug}/")
    try:
        expect(page.locator("#status-card")).to_have_attribute(
            "data-status", "active", timeout=COME_UP_MS
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{console.diagnostics()}") from exc


def test_a_multi_turn_chat_with_settings_code_and_two_endpoints_side_by_side(
    browser: Browser, live_console: LiveConsole, cast: Cast
) -> None:
    _running(cast, "left")
    _running(cast, "right")
    context = browser.new_context(viewport={"width": WIDTHS[0][0], "height": WIDTHS[0][1]})
    page = context.new_page()
    sign_in(page, live_console)
    _wait_active(page, live_console, "right")
    _wait_active(page, live_console, "left")

    page.locator("#playground summary", has_text="Settings").click()
    page.fill("#playground-system", "You answer briefly.")
    page.fill("#playground-temperature", "0.3")
    page.fill("#playground-top-p", "0.9")
    page.fill("#playground-max", "24")
    page.select_option("#playground-compare", "endpoint:right")
    expect(page.locator("#playground-column-b")).to_be_visible()
    # The temporary key is made for both endpoints, as the side-by-side choice says.
    page.get_by_role("button", name="Create a temporary key").click()
    expect(page.locator("#playground-key-slot")).to_contain_text("Temporary key")

    columns = (page.locator("#playground-output"), page.locator("#playground-output-b"))
    for turn, prompt in enumerate(("Name a GPU.", "And another one?"), start=1):
        page.fill("#playground-prompt", prompt)
        page.click("#playground-send")
        for column in columns:
            expect(column).to_have_attribute("data-done", "true", timeout=REPLY_MS)
            expect(column.locator(".msg-assistant")).to_have_count(turn)
        expect(page.locator("#playground-error")).to_be_empty()
    for column in columns:
        expect(column.locator(".msg-user")).to_have_count(2)
        expect(column.locator(".msg-stats").last).to_contain_text(re.compile(r"TTFT \d+ ms"))
        expect(column.locator(".msg-stats").last).to_contain_text("cached")
    expect(page.locator("#playground-title-a")).to_have_text("left")
    expect(page.locator("#playground-title-b")).to_have_text("right")

    # "View code": the second message's exact request carries the first turn along.
    page.locator("#playground-code summary").click()
    curl = page.locator("#playground-code-curl")
    expect(curl).to_contain_text("/endpoints/left/v1/chat/completions")
    expect(curl).to_contain_text("/endpoints/right/v1/chat/completions")
    expect(curl).to_contain_text("You answer briefly.")
    expect(curl).to_contain_text("Name a GPU.")
    expect(curl).to_contain_text('"temperature": 0.3')
    expect(curl).to_contain_text("$PLINTH_API_KEY")
    expect(page.locator("#playground-code-python")).to_contain_text("client.chat.completions")
    axe_at_every_width(page, "side-by-side")

    # Clear starts both conversations afresh.
    page.click("#playground-clear")
    for column in columns:
        expect(column.locator(".msg")).to_have_count(0)
    context.close()
