"""The console in a real browser, against a live server, a Celery worker and the local cluster
(simulated engines and the smg router as real processes): the user's whole journey with one
endpoint, and a sweep of every page at desktop and phone widths (screenshots kept under
artifacts/screenshots/)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from controlplane import services as platform
from deployments.endpoints import services
from deployments.traffic.models import MetricSample, UsageRecord
from tests.browser.conftest import SCREENSHOTS, BrowserErrors, LiveConsole
from tests.conftest import PASSWORD, Cast

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
# A bound on liveness, not a timing assertion: a loaded 2-core machine is slow to start.
COME_UP_MS = 180_000


def shoot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)


def answer_dialog(page: Page, button: str) -> None:
    """Click ``button`` in the console's confirmation dialog (console.js), once it is open."""
    dialog = page.locator("dialog#confirm-dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name=button, exact=True).click()
    expect(dialog).to_be_hidden()


def sign_in(page: Page, console: LiveConsole, username: str = "alice") -> None:
    page.goto(f"{console.url}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.get_by_role("heading", name="Endpoints")).to_be_visible()


def create_endpoint_in_wizard(page: Page, slug: str) -> None:
    page.get_by_role("link", name="New endpoint").click()
    page.fill("#f-slug", slug)
    # An invalid setting is refused in place, before anything is saved. (TP is a choice of the
    # widths the model's heads divide, so it cannot be wrong: a replica count can.)
    page.fill("#f-autoscaling-max-replicas", "two")
    replica_issues = page.locator("#issues-f-autoscaling-max-replicas")
    expect(replica_issues).to_contain_text("enter a whole number")
    expect(page.locator("#error-count")).to_contain_text("1 setting to fix")
    shoot(page, "journey-wizard-replicas-error")
    page.fill("#f-autoscaling-max-replicas", "1")
    expect(replica_issues).to_be_empty()
    expect(page.locator("#fit-verdict")).to_contain_text("Fits")
    expect(page.locator("#est-cost")).to_contain_text("$")
    page.click("#save")
    expect(page).to_have_url(re.compile(f"/endpoints/{slug}/$"))


def watch_it_come_up(page: Page) -> None:
    """Active without a reload: a marker set on this page's window survives until then."""
    page.evaluate("window.__sameDocument = true")
    card = page.locator("#status-card")
    expect(card).to_have_attribute("data-status", "active", timeout=COME_UP_MS)
    expect(card.locator(".card-head .badge")).to_have_text("Active")
    assert page.evaluate("window.__sameDocument === true")
    # Settled: the card no longer carries its polling attributes.
    expect(card).not_to_have_attribute("hx-trigger", re.compile("."))


def stream_a_reply(page: Page) -> None:
    page.get_by_role("button", name="Create a temporary key").click()
    expect(page.locator("#playground-key-slot")).to_contain_text("Temporary key")
    page.fill("#playground-prompt", "Say hello to the console test.")
    page.click("#playground-send")
    output = page.locator("#playground-output")
    expect(output).to_have_attribute("data-done", "true", timeout=30_000)
    expect(page.locator("#playground-error")).to_be_empty()
    assert output.inner_text().strip()
    expect(page.locator("#stat-ttft")).to_contain_text("ms")
    expect(page.locator("#stat-tokens")).not_to_have_text("\N{EN DASH}")
    expect(page.locator("#stat-cached")).not_to_have_text("\N{EN DASH}")
    shoot(page, "journey-playground-reply")


def edit_and_roll_back(page: Page) -> None:
    page.get_by_role("link", name="Settings", exact=True).click()
    page.locator("#section-batching > summary").click()  # collapsed behind its summary
    page.fill("#f-batching-max-running-requests", "64")
    page.fill("#f-message", "bigger batches")
    page.click("#save")
    expect(page).to_have_url(re.compile("/endpoints/chat/revisions/$"))
    expect(page.locator("#revision-2")).to_contain_text("bigger batches")
    expect(page.locator("#revision-2")).to_contain_text("batching.max_running_requests")
    # Roll back to revision 1 (after a confirmation): revision 3 restores its settings.
    page.get_by_role("button", name="Roll back to r1").click()
    answer_dialog(page, "Roll back to r1")
    expect(page.locator("#revision-3")).to_contain_text("rollback to r1")


def watch_the_rollback_serve(page: Page) -> None:
    """The overview follows the rollback live: it polls (the target is not serving yet) until
    revision 3 serves alone, then stops, without a reload."""
    page.get_by_role("link", name="Overview", exact=True).click()
    page.evaluate("window.__sameDocument = true")
    card = page.locator("#status-card")
    expect(card).to_have_attribute("data-settled", "true", timeout=COME_UP_MS)
    expect(card).to_have_attribute("data-status", "active")
    expect(card).to_contain_text("r3 serving")
    expect(card).not_to_contain_text("rolling out")
    expect(card).to_contain_text(re.compile(r"Replicas ready\s*1 / 1"))
    assert page.evaluate("window.__sameDocument === true")


def create_and_revoke_a_key(page: Page) -> None:
    keys_link = page.get_by_role("navigation", name="Main").get_by_role("link", name="API keys")
    keys_link.click()
    page.fill("#key-name", "ci")
    page.click("#create-key")
    expect(page.locator("#created-key")).to_have_value(re.compile(r".{24,}"))
    page.reload()  # post/redirect/get: a reload neither shows the key again nor makes another
    expect(page.locator("#created-key")).to_have_count(0)  # shown once only
    expect(page.locator("tr", has_text="ci")).to_have_count(1)
    page.locator("tr", has_text="ci").get_by_role("button", name="Revoke").click()
    answer_dialog(page, "Revoke")
    expect(page.locator("tr", has_text="ci")).to_contain_text("revoked")


def test_create_watch_call_edit_roll_back_and_delete(
    page: Page, live_console: LiveConsole, cast: Cast
) -> None:
    sign_in(page, live_console)
    create_endpoint_in_wizard(page, "chat")
    try:
        watch_it_come_up(page)
        stream_a_reply(page)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{live_console.diagnostics()}") from exc
    edit_and_roll_back(page)
    try:
        watch_the_rollback_serve(page)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{live_console.diagnostics()}") from exc
    create_and_revoke_a_key(page)

    page.goto(f"{live_console.url}/endpoints/chat/delete/")
    page.fill("#confirm-slug", "chat")
    page.get_by_role("button", name="Delete chat").click()
    expect(page).to_have_url(re.compile("/endpoints/$"))
    # Listed as Deleting while its processes are torn down; the live list then drops it.
    rows = page.locator("#endpoint-rows")
    # (The emptied list shows the first-run steps, whose templates mention chats: look at rows.)
    expect(rows.locator('tr[data-slug="chat"]')).to_have_count(0, timeout=COME_UP_MS)
    expect(rows).not_to_have_attribute("hx-trigger", re.compile("."))


def _sweep_data(cast: Cast) -> str:
    """One stopped endpoint with two revisions, samples, a key, a secret and usage."""
    actor = cast.actor(cast.alice, cast.acme)
    spec = {
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
        "hardware": {"gpu": "H100-SXM"},
    }
    endpoint = services.create_deployment(actor, slug="sweep", name="Sweep", spec=spec)
    services.stop(actor, endpoint.pk)  # nothing needs to run for pictures
    bigger = {**spec, "batching": {"max_running_requests": 64}}
    services.update_settings(actor, endpoint.pk, spec=bigger, base_revision=1, message="bigger")
    now = timezone.now()
    for i in range(30):
        MetricSample.objects.create(
            deployment=endpoint, ts=now - timedelta(seconds=20 * i), requests_per_s=3 + i % 5,
            tokens_per_s=300 + 10 * i, ttft_p50=0.05, ttft_p90=0.09, itl_p50=0.01, itl_p90=0.02,
            running=4, queued=i % 3, kv_usage=0.4, cache_hit_rate=0.6, replicas_ready=2,
            replicas=[  # a canary: one replica per revision, so the charts draw a line each
                {"name": f"r{n}-engine-0", "revision": n, "requests_per_s": (3 + i % 5) / 2,
                 "tokens_per_s": 150 + 5 * i * n, "running": 2, "kv_usage": 0.2 * n}
                for n in (1, 2)
            ],
        )  # fmt: skip
    key = platform.create_api_key(actor, name="backend", kind="inference")
    platform.set_secret(actor, name="hf-token", value="hf_secret", description="HF")
    UsageRecord.objects.create(
        organization=cast.acme, api_key=key.api_key, deployment_id=endpoint.pk,
        deployment_slug="sweep", minute=now.replace(second=0, microsecond=0), requests=5,
        prompt_tokens=500, cached_tokens=200, completion_tokens=900,
    )  # fmt: skip
    return "sweep"


PAGES = [
    ("endpoints", "/endpoints/"),
    ("new-endpoint", "/endpoints/new/"),
    ("endpoint", "/endpoints/{slug}/"),
    ("metrics", "/endpoints/{slug}/metrics/"),
    ("events", "/endpoints/{slug}/events/"),
    ("logs", "/endpoints/{slug}/logs/"),
    ("revisions", "/endpoints/{slug}/revisions/"),
    ("diff", "/endpoints/{slug}/revisions/diff/?a=1&b=2"),
    ("settings", "/endpoints/{slug}/settings/"),
    ("delete", "/endpoints/{slug}/delete/"),
    ("keys", "/keys/"),
    ("usage", "/usage/"),
    ("costs", "/costs/"),
    ("optimize", "/optimize/"),
    (
        "optimize-results",
        "/optimize/?model=meta-llama/Llama-3.1-8B-Instruct&gpus=H100-SXM&gpus=L40S"
        "&input_tokens=1024&output_tokens=256&rate_rps=8&prefix_share=0&turns=1&ttft_ms=1000"
        "&itl_ms=50&confirm=on",
    ),
    ("members", "/members/"),
    ("clusters", "/clusters/"),
    ("secrets", "/secrets/"),
    ("audit", "/audit/"),
    ("invitations", "/invitations/"),
    ("not-found", "/endpoints/nothing-here/"),
]

# Evaluated in the page: is the stylesheet applied, and does anything overflow the viewport?
STYLE_PROBE = """() => {
  const body = getComputedStyle(document.body);
  const bar = document.querySelector('.topbar');
  const unstyledButtons = [...document.querySelectorAll('button, .button')].filter(
    (b) => b.offsetParent !== null && getComputedStyle(b).borderRadius === '0px').length;
  return {
    font: body.fontFamily,
    topbar: bar ? getComputedStyle(bar).backgroundColor : null,
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    unstyledButtons,
  };
}"""


def _check_page(page: Page, name: str, width: int) -> None:
    text = page.content()
    assert "Server Error" not in text and "Traceback" not in text, name
    probe = page.evaluate(STYLE_PROBE)
    assert "system-ui" in probe["font"], (name, probe)
    assert probe["topbar"] == "rgb(16, 24, 40)", (name, probe)
    assert probe["unstyledButtons"] == 0, (name, probe)
    assert probe["overflow"] <= 0, f"{name} at {width}px is wider than the screen: {probe}"


def test_every_page_at_desktop_and_phone_width(
    browser: Browser, live_console: LiveConsole, cast: Cast, browser_errors: BrowserErrors
) -> None:
    slug = _sweep_data(cast)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width, height in ((1280, 900), (390, 844)):
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.goto(f"{live_console.url}/login/")
        _check_page(page, "login", width)
        page.screenshot(path=SCREENSHOTS / f"login-{width}.png", full_page=True)
        sign_in(page, live_console)
        if width < 760:  # the navigation folds into a menu on phones
            expect(page.get_by_role("link", name="Audit log")).to_be_hidden()
            page.click(".nav-toggle-label")
            expect(page.get_by_role("link", name="Audit log")).to_be_visible()
            page.screenshot(path=SCREENSHOTS / f"menu-{width}.png")
        for name, path in PAGES:
            url = live_console.url + path.format(slug=slug)
            if name == "not-found":
                browser_errors.expect_status(url, 404)
            response = page.goto(url)
            assert response is not None
            assert response.status < 500, (name, response.status)
            assert response.status == (404 if name == "not-found" else 200), name
            _check_page(page, name, width)
            page.screenshot(path=SCREENSHOTS / f"{name}-{width}.png", full_page=True)
        context.close()


def test_a_temporary_key_swaps_in_under_the_csp_whatever_styled_the_key_field(
    page: Page, live_console: LiveConsole, cast: Cast, browser_errors: BrowserErrors
) -> None:
    # htmx settles a swap by copying attributes from each old element onto its swapped-in
    # twin (same id); a style attribute written that way is inline style, which the CSP
    # refuses. Anything that styles the key field through the CSSOM, which the CSP allows (a
    # password manager does), left it an empty style attribute, and htmx copied that.
    actor = cast.actor(cast.alice, cast.acme)
    spec = {
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
        "hardware": {"gpu": "H100-SXM"},
    }
    services.stop(actor, services.create_deployment(actor, slug="keyed", name="K", spec=spec).pk)
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/keyed/")
    page.evaluate(
        """() => { const field = document.getElementById("playground-key");
        field.style.backgroundImage = "none"; field.style.backgroundImage = ""; }"""
    )
    page.get_by_role("button", name="Create a temporary key").click()
    expect(page.locator("#playground-key-slot")).to_contain_text("Temporary key")
    page.evaluate("0")  # a round trip: console messages sent before it have arrived
    assert not browser_errors.seen, browser_errors.seen


def test_an_invited_person_joins_by_accepting_under_the_csp(
    browser: Browser, live_console: LiveConsole, cast: Cast
) -> None:
    from django.contrib.auth import get_user_model

    erin = get_user_model().objects.create_user("erin", password=PASSWORD)
    admin = browser.new_context().new_page()
    sign_in(admin, live_console)
    admin.goto(f"{live_console.url}/members/")
    admin.fill("#member-username", "erin")
    admin.select_option("#member-role", "developer")
    admin.get_by_role("button", name="Invite").click()
    expect(admin.locator(".flash")).to_contain_text("They join when they sign in and accept")
    # A confirmation the admin cancels (console.js's dialog, no inline handler) leaves the
    # invitation be.
    admin.locator("#pending-invitations").get_by_role("button", name="Revoke").click()
    answer_dialog(admin, "Cancel")
    expect(admin.locator("#pending-invitations")).to_contain_text("erin")

    person = browser.new_context().new_page()
    person.goto(f"{live_console.url}/login/")
    person.fill("#id_username", "erin")
    person.fill("#id_password", PASSWORD)
    person.click("button[type=submit]")
    person.get_by_role("link", name=re.compile("invitations", re.I)).first.click()
    expect(person.locator("#my-invitations")).to_contain_text("Acme")
    person.get_by_role("button", name="Accept").click()
    expect(person.get_by_role("heading", name="Endpoints")).to_be_visible()
    expect(person.locator(".flash")).to_contain_text("You joined Acme as developer")
    assert erin.memberships.get().role == "developer"
