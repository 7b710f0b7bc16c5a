"""Issue 18 in a real browser, as a person walks it: a template is one click and "Create" the
second; the wizard opens on its Basics with the rest collapsed behind live summaries; TP, the
quantization names and the help links; the fit panel's headroom, and on a phone the panel stays
beside the field being edited; events grouped by rollout, each linking to its revision. axe-core
finds nothing at desktop and phone widths on each of these pages."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.endpoints.timeline import record_event
from tests.browser.conftest import SCREENSHOTS, LiveConsole
from tests.browser.test_console_journey import shoot, sign_in
from tests.browser.test_console_trust import WIDTHS, axe_violations, desktop  # noqa: F401
from tests.conftest import Cast

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _shot(name: str) -> str:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return str(SCREENSHOTS / f"{name}.png")


@pytest.fixture
def phone(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    yield context.new_page()
    context.close()


def test_a_template_is_one_click_and_create_the_second(
    desktop: Page,  # noqa: F811
    live_console: LiveConsole,
    cast: Cast,
) -> None:
    page = desktop
    sign_in(page, live_console)
    page.get_by_role("link", name="New endpoint").click()
    expect(page.locator("#template-optimizer")).to_have_attribute("href", "/optimize/")
    page.get_by_role("link", name=re.compile("Chat, latency first")).click()  # click 1
    expect(page.locator("#template-chat")).to_have_attribute("aria-current", "true")
    expect(page.locator("#f-slug")).to_have_value("chat")
    expect(page.locator("#fit-verdict")).to_contain_text("Fits 26 requests of 16384 tokens")
    expect(page.locator("#fit-headroom")).to_contain_text("Room for all 24 max running")
    assert axe_violations(page) == []
    page.click("#save")  # click 2
    expect(page).to_have_url(re.compile("/endpoints/chat/$"))
    target = Deployment.objects.get(slug="chat").target_revision
    assert target is not None and target.spec["batching"]["max_running_requests"] == 24


def test_basics_first_the_rest_behind_live_summaries(
    desktop: Page,  # noqa: F811
    live_console: LiveConsole,
    cast: Cast,
) -> None:
    page = desktop
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/new/")
    expect(page.locator("#f-model-source")).to_be_visible()
    expect(page.locator("#f-hardware-gpu")).to_be_visible()
    expect(page.locator("#f-autoscaling-max-replicas")).to_be_visible()
    # Everything else is collapsed, each section's values on one line.
    expect(page.locator("#f-batching-max-running-requests")).to_be_hidden()
    expect(page.locator("#summary-parallelism")).to_contain_text("Tensor parallel (TP) 1")
    page.locator("#section-batching > summary").click()
    page.fill("#f-batching-max-running-requests", "256")
    expect(page.locator("#summary-batching")).to_contain_text("Max running requests 256")
    # Headroom: 3 full-length (131072-token) requests fit, fewer than 256.
    expect(page.locator("#fit-verdict")).to_contain_text("Fits 3 requests of 131072 tokens")
    expect(page.locator("#fit-headroom")).to_contain_text("Fewer than the 256 max running")
    expect(page.locator("#estimate")).not_to_contain_text("batching.max_running_requests")
    expect(page.locator("#estimate")).not_to_contain_text("engine:")
    # TP is a choice of the widths the heads divide; quantization by its everyday names.
    page.locator("#section-parallelism > summary").click()
    tp = page.locator("#f-parallelism-tp option")
    expect(tp).to_have_text(["1 GPU", "2 GPUs", "4 GPUs", "8 GPUs", "16 GPUs"])
    page.select_option("#f-parallelism-tp", "2")
    expect(page.locator("#summary-parallelism")).to_contain_text("Tensor parallel (TP) 2")
    page.locator("#section-quantization > summary").click()
    page.select_option("#f-quantization-method", label="NVFP4 checkpoint (ModelOpt) (modelopt_fp4)")
    # Each field says what it does and links to SGLang's page for its flag.
    docs = page.locator("#help-f-parallelism-tp a")
    expect(docs).to_contain_text("--tp-size")
    expect(docs).to_have_attribute("href", re.compile(r"server_arguments\.html#:~:text="))
    # A section holding an error says so in its summary while collapsed.
    page.locator("#section-batching > summary").click()  # close it again
    page.locator("#section-quantization > summary").click()
    expect(page.locator("#f-batching-max-running-requests")).to_be_hidden()
    page.locator("#section-batching > summary").click()
    page.fill("#f-batching-chunked-prefill-size", "0")
    page.locator("#section-batching > summary").click()
    expect(page.locator("#summary-batching")).to_contain_text("Needs a fix")
    shoot(page, "wizard-sections")
    assert axe_violations(page) == []


def test_on_a_phone_the_fit_stays_beside_the_field_being_edited(
    phone: Page, live_console: LiveConsole, cast: Cast
) -> None:
    page = phone
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/new/")
    page.locator("#section-batching > summary").click()
    field = page.locator("#f-batching-max-running-requests")
    field.scroll_into_view_if_needed()
    field.fill("256")
    expect(page.locator("#fit-headroom")).to_contain_text("Fewer than the 256")
    # The panel is on screen, right below what changed it.
    panel, box = page.locator("#estimate").bounding_box(), field.bounding_box()
    assert panel is not None and box is not None
    assert panel["y"] + panel["height"] <= 844 + 1 and panel["y"] >= 0, panel
    # (Within a pixel: the sticky panel's edge and the field's are laid out in fractions.)
    assert -1 <= panel["y"] - (box["y"] + box["height"]) < 600, (panel, box)
    expect(page.locator("#fit-verdict")).to_be_in_viewport()
    page.screenshot(path=_shot("wizard-phone-fit"))  # the viewport, as the person sees it
    assert axe_violations(page) == []


def test_events_are_grouped_by_rollout_and_link_to_revisions(
    browser: Browser, live_console: LiveConsole, cast: Cast
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    spec = {
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
        "hardware": {"gpu": "H100-SXM"},
    }
    endpoint = services.create_deployment(actor, slug="grouped", name="Grouped", spec=spec)
    services.update_settings(
        actor, endpoint.pk, spec={**spec, "batching": {"max_running_requests": 32}}, base_revision=1
    )
    services.stop(actor, endpoint.pk)
    record_event(
        endpoint, "info", "Deploying", "revision 1: starting 1 replica(s); deadline 600 s", 1
    )
    record_event(endpoint, "info", "ScaledUp", "2 replicas for 40 in flight")
    record_event(endpoint, "warning", "RolloutFailed", "revision 2 was not ready; rolled back", 2)
    for width, height in WIDTHS:
        context = browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        try:
            sign_in(page, live_console)
            page.goto(f"{live_console.url}/endpoints/grouped/events/")
            # (The worker may add lines of its own as it stops the endpoint: no order assumed.)
            failed = page.locator(".rollout-warning .rollout-head", has_text="Revision 2")
            expect(failed).to_be_visible()
            expect(page.locator(".rollout-head", has_text="Revision 1").first).to_be_visible()
            assert axe_violations(page) == [], f"at {width}px"
            page.get_by_role("link", name="Revision 1").first.click()
            expect(page).to_have_url(re.compile("/endpoints/grouped/revisions/#revision-1$"))
            expect(page.locator("#revision-1")).to_be_visible()
        finally:
            context.close()
