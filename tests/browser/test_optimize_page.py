"""The Optimize page in a real browser: ask, read the pick, the Pareto chart and the waterfall,
deploy the pick through the wizard; and the wizard's own "Recommend settings".

Runs under the console's Content-Security-Policy (no inline script or style), with axe-core
checking the page once results are in.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from deployments.endpoints.models import Deployment
from runtime.optimize.types import WATERFALL
from tests.browser.conftest import LiveConsole
from tests.browser.test_console_journey import sign_in
from tests.browser.test_console_trust import axe_violations, desktop  # noqa: F401 (fixture)
from tests.conftest import Cast

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_ask_read_and_deploy_the_pick(
    desktop: Page,  # noqa: F811
    live_console: LiveConsole,
    cast: Cast,
) -> None:
    page = desktop
    sign_in(page, live_console)
    page.get_by_role("link", name="Optimize").click()
    page.fill("#opt-model", "acme/not-a-model")
    page.click("#optimize-submit")
    expect(page.locator("#issues-opt-model")).to_contain_text("not in the catalogue")
    page.fill("#opt-model", "meta-llama/Llama-3.1-8B-Instruct")
    page.select_option("#opt-gpus", ["H100-SXM", "L40S"])
    page.fill("#opt-rate_rps", "8")
    page.fill("#opt-itl_ms", "40")
    page.check("#opt-confirm")
    page.click("#optimize-submit")
    best = page.locator("#optimize-best")
    expect(best).to_contain_text("Cheapest meeting the targets", timeout=30_000)
    expect(best).to_contain_text("predicted TTFT p90")
    expect(page.locator("#best-measured")).to_contain_text("Simulated run")
    assert "rate_rps=8" in page.url  # htmx pushed the query: the result can be shared
    # The Pareto chart is drawn by uPlot as points on numeric axes, the waterfall as bars.
    chart = page.locator('figure[data-chart-id="chart-pareto-front"]')
    expect(chart.locator(".u-over")).to_have_count(1)
    # A bar for the baseline and one per optimization the waterfall adds.
    expect(page.locator(".waterfall li")).to_have_count(1 + len(WATERFALL))
    expect(page.locator("#ranked tbody tr").first).to_be_visible()
    assert axe_violations(page) == []
    # Deploy this: the wizard opens with the pick's settings; name it and create it.
    gpu = best.locator("h2 .mono").inner_text().split()[0]
    page.click("#deploy-best")
    expect(page.locator("#prefilled")).to_be_visible()
    expect(page.locator("#f-hardware-gpu")).to_have_value(gpu)
    page.fill("#f-slug", "picked")
    page.click("#save")
    expect(page.get_by_role("heading", name="picked")).to_be_visible()
    target = Deployment.objects.get(slug="picked").target_revision
    assert target is not None and target.spec["hardware"]["gpu"] == gpu


def test_the_wizard_recommends_settings_for_its_model_and_gpu(
    desktop: Page,  # noqa: F811
    live_console: LiveConsole,
    cast: Cast,
) -> None:
    page = desktop
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/new/")
    page.fill("#f-slug", "advised")
    page.select_option("#f-hardware-gpu", "L40S")
    page.locator("#recommend summary").click()
    page.fill("#id_rec-rate_rps", "6")
    page.click("#recommend-submit")
    expect(page.locator("#recommendation")).to_contain_text("Filled in", timeout=30_000)
    expect(page.locator("#f-hardware-gpu")).to_have_value("L40S")
    expect(page.locator("#f-slug")).to_have_value("advised")
    assert axe_violations(page) == []
