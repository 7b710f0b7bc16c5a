"""The console in a real browser, for what only a browser shows: a created key survives no
reload (post/redirect/get), a refused save keeps the form as it was posted, a chart with one
sample is a round dot, and axe-core finds nothing on any page, at desktop and phone widths.

axe-core comes from the ``axe-playwright-python`` package (its bundled ``axe.min.js``),
injected into each page; no network is needed.
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.utils import timezone
from playwright.sync_api import Browser, BrowserContext, Page, expect

from controlplane import services as platform
from controlplane.models import ApiKey
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.traffic.models import MetricSample, UsageRecord
from tests.browser.conftest import BrowserErrors, LiveConsole, at_rest
from tests.browser.test_console_journey import PAGES, sign_in
from tests.conftest import Cast

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
AXE = Axe()
WIDTHS = ((1280, 900), (390, 844))


@pytest.fixture
def desktop(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield context.new_page()
    context.close()


def axe_violations(page: Page) -> list[str]:
    """axe-core's violations on the page as it is now, one readable line each."""
    results: dict[str, Any] = AXE.run(page).response
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:5]}"
        for v in results["violations"]
    ]


def _stopped_endpoint(cast: Cast, slug: str) -> Deployment:
    actor = cast.actor(cast.alice, cast.acme)
    endpoint = services.create_deployment(actor, slug=slug, name=slug.title(), spec=SPEC)
    services.stop(actor, endpoint.pk)  # nothing needs to run for these pages
    at_rest(endpoint.pk)  # and the worker is done with it: no engine of the create writes logs
    return endpoint


def test_a_created_key_is_shown_once_and_a_reload_creates_none(
    desktop: Page, live_console: LiveConsole, cast: Cast
) -> None:
    page = desktop
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/keys/")
    page.fill("#key-name", "ci")
    page.click("#create-key")
    expect(page).to_have_url(re.compile("/keys/$"))
    shown = page.locator("#created-key")
    expect(shown).to_have_value(re.compile(r"^pli_"))
    expect(page.get_by_label(re.compile("^Key pli_"))).to_have_count(1)  # labelled
    assert axe_violations(page) == []
    page.reload()  # after post/redirect/get a reload repeats the GET, never the POST
    expect(page.locator("#created-key")).to_have_count(0)
    expect(page.locator("tr", has_text="ci")).to_have_count(1)
    assert ApiKey.objects.filter(name="ci").count() == 1


def test_a_refused_save_keeps_the_catalogue_architecture(
    desktop: Page, live_console: LiveConsole, cast: Cast, browser_errors: BrowserErrors
) -> None:
    _stopped_endpoint(cast, "taken")
    page = desktop
    sign_in(page, live_console)
    # The refused save answers its page with 422, as every refused console form does.
    browser_errors.expect_status(f"{live_console.url}/endpoints/new/", 422)
    page.goto(f"{live_console.url}/endpoints/new/")
    page.fill("#f-slug", "taken")
    page.click("#save")
    expect(page.locator("#f-slug ~ .issues")).to_contain_text("taken")
    expect(page.locator("#arch-toggle")).not_to_be_checked()
    expect(page.locator(".arch-fields")).to_be_hidden()
    # The live check after the refusal sees the same form: no architecture demanded.
    page.locator("#section-parallelism > summary").click()
    page.select_option("#f-parallelism-tp", "2")
    expect(page.locator("#fit-verdict")).to_contain_text("Fits")
    expect(page.locator("[data-field^='model.architecture']")).to_have_count(0)
    assert axe_violations(page) == []
    page.fill("#f-slug", "fresh")
    page.click("#save")
    expect(page).to_have_url(re.compile("/endpoints/fresh/$"))
    assert Deployment.objects.get(slug="fresh").target_revision.spec["parallelism"]["tp"] == 2


def test_a_lone_sample_is_a_round_dot(desktop: Page, live_console: LiveConsole, cast: Cast) -> None:
    endpoint = _stopped_endpoint(cast, "one")
    MetricSample.objects.create(
        deployment=endpoint, ts=timezone.now() - timedelta(minutes=30), requests_per_s=2.0
    )
    page = desktop
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/one/metrics/")
    # uPlot's plotting area (the canvas under its overlay): the dot is found in its pixels.
    plot = page.locator(".chart-live .u-over").first
    expect(plot).to_be_visible()
    width, height, pixels = decode_png(plot.screenshot(animations="disabled"))
    left, top, right, bottom = bounds(width, height, pixels, is_accent)
    box = (left, top, right, bottom)
    assert right - left > 2 and abs((right - left) - (bottom - top)) <= 1, box
    # Half an hour ago in a one-hour window: the middle of the plot, not its left edge.
    assert 0.4 < (left + right) / 2 / width < 0.6, (left, right, width)


def test_a_chart_has_a_time_axis_hover_values_and_zoom(
    browser: Browser, live_console: LiveConsole, cast: Cast
) -> None:
    endpoint = _stopped_endpoint(cast, "hover")
    now = timezone.now()
    for minutes, rate in ((40, 1.0), (30, 2.5), (20, 4.0)):
        MetricSample.objects.create(
            deployment=endpoint, ts=now - timedelta(minutes=minutes), requests_per_s=rate
        )
    context = browser.new_context(viewport={"width": 1280, "height": 900}, timezone_id="UTC")
    page = context.new_page()
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/hover/metrics/")
    chart = page.locator("#charts .chart-live").first  # Requests, req/s
    expect(chart).to_have_attribute("aria-label", re.compile(r"^Requests \(req/s\)"))
    start, end = float(chart.get_attribute("data-x-min")), float(chart.get_attribute("data-x-max"))
    assert end - start == pytest.approx(3600, abs=1)  # the time axis spans the whole window
    legend = chart.locator(".u-legend")
    expect(legend.locator(".u-series").nth(1)).to_contain_text("4 req/s")  # at rest: the latest
    over = chart.locator(".u-over")
    box = over.bounding_box()
    assert box is not None
    middle = now - timedelta(minutes=30)
    x = box["x"] + box["width"] * (middle.timestamp() - start) / (end - start)
    page.mouse.move(x, box["y"] + box["height"] / 2)
    expect(legend.locator(".u-series").nth(1)).to_contain_text("2.5 req/s")
    expect(legend.locator(".u-series").first).to_contain_text(middle.strftime("%Y-%m-%d %H:%M"))
    # Drag over the last two samples: the x axis narrows to that range; a double-click resets.
    page.mouse.move(x - 5, box["y"] + 10)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + 10, steps=5)
    page.mouse.up()
    zoomed_min = str(chart.get_attribute("data-x-min"))
    zoomed = float(zoomed_min), float(chart.get_attribute("data-x-max"))
    assert start < zoomed[0] < middle.timestamp() and zoomed[1] < end - 300, (start, zoomed, end)
    # The live page swaps its charts every 15 s: the new chart is drawn, still zoomed.
    page.evaluate(
        "url => htmx.ajax('GET', url, {target: '#charts', swap: 'outerHTML'})",
        f"{live_console.url}/endpoints/hover/metrics/?window=60",
    )
    expect(page.locator("#charts .chart-live")).to_have_count(9)
    expect(chart).to_have_attribute("data-x-min", zoomed_min)
    over.dblclick()
    expect(chart).not_to_have_attribute("data-x-min", zoomed_min)
    assert float(chart.get_attribute("data-x-min")) == pytest.approx(start, abs=1)
    assert axe_violations(page) == []
    context.close()


def decode_png(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGBA bytes) of an 8-bit, non-interlaced PNG (a screenshot)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6), (depth, colour)
    step = 4 if colour == 6 else 3
    raw, rows, previous = zlib.decompress(idat), [], bytearray(width * step)
    for y in range(height):
        start = y * (width * step + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + width * step])
        for i in range(len(line)):
            a = line[i - step] if i >= step else 0
            b, c = previous[i], previous[i - step] if i >= step else 0
            line[i] = (line[i] + _predict(kind, a, b, c)) & 0xFF
        rows.append(bytes(line if step == 4 else _with_alpha(line)))
        previous = line
    return width, height, rows


def _predict(kind: int, a: int, b: int, c: int) -> int:
    if kind == 4:  # Paeth
        p = a + b - c
        pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
        return a if pa <= pb and pa <= pc else b if pb <= pc else c
    return (0, a, b, (a + b) // 2)[kind]


def _with_alpha(line: bytearray) -> bytearray:
    out = bytearray()
    for i in range(0, len(line), 3):
        out += line[i : i + 3] + b"\xff"
    return out


def is_accent(r: int, g: int, b: int) -> bool:
    """The first series' colour (#3355ff), antialiased edges included."""
    return b > 200 and r < 150 and g < 170


def bounds(width: int, height: int, rows: list[bytes], match: Any) -> tuple[int, int, int, int]:
    xs, ys = [], []
    for y, row in enumerate(rows):
        for x in range(width):
            if match(*row[4 * x : 4 * x + 3]):
                xs.append(x)
                ys.append(y)
    assert xs, "nothing of that colour on the plot"
    return min(xs), min(ys), max(xs) + 1, max(ys) + 1


def test_a_followed_log_shows_lines_as_they_are_written(
    desktop: Page, live_console: LiveConsole, cast: Cast
) -> None:
    endpoint = _stopped_endpoint(cast, "tail")
    log_dir = Path(live_console.run_dir) / str(endpoint.pk)
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / "r1-engine-0.log"
    log.write_text("2025-06-01T12:00:00Z first line\n")
    page = desktop
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/endpoints/tail/logs/")
    lines = page.locator("#log-lines .log-line")
    expect(lines).to_have_count(1)
    page.get_by_label("Follow").check()  # the controls re-render the card, now polling
    expect(page.locator("#log-follow")).to_have_count(1)
    with log.open("a") as handle:
        handle.write("second line\n")
    expect(lines).to_have_count(2)  # appended by a poll: the first line is not repeated
    expect(lines.nth(1)).to_have_text("second line")
    page.get_by_label("Timestamps").check()
    expect(page.locator("#log-lines time.log-ts").first).to_have_attribute(
        "datetime", re.compile("^2025-06-01T")
    )
    with log.open("a") as handle:
        handle.write("third line\n")
    expect(lines).to_have_count(3)
    assert axe_violations(page) == []


def _usage_and_logs(cast: Cast, live_console: LiveConsole) -> str:
    """An endpoint with one usage hour, one metric sample, a key and a log tail."""
    endpoint = _stopped_endpoint(cast, "axe")
    actor = cast.actor(cast.alice, cast.acme)
    bigger = {**SPEC, "batching": {"max_running_requests": 64}}
    services.update_settings(actor, endpoint.pk, spec=bigger, base_revision=1, message="bigger")
    platform.set_secret(actor, name="hf-token", value="hf_secret", description="HF")
    key = platform.create_api_key(actor, name="backend", kind="inference")
    UsageRecord.objects.create(
        organization=cast.acme, api_key=key.api_key, deployment_id=endpoint.pk,
        deployment_slug="axe", minute=timezone.now().replace(second=0, microsecond=0),
        requests=5, prompt_tokens=500, cached_tokens=200, completion_tokens=900,
    )  # fmt: skip
    MetricSample.objects.create(deployment=endpoint, ts=timezone.now(), requests_per_s=1.0)
    log_dir = Path(live_console.run_dir) / str(endpoint.pk)
    log_dir.mkdir(parents=True, exist_ok=True)
    long_line = "INFO request served " + "x" * 400  # wider than any screen: it scrolls
    (log_dir / "engine-0.log").write_text("\n".join([long_line] * 80) + "\n")
    return endpoint.slug


def _sweep(
    context: BrowserContext, console: LiveConsole, slug: str, errors: BrowserErrors
) -> dict[str, list[str]]:
    """axe on the sign-in page and on every page of the console sweep, as alice sees them."""
    page = context.new_page()
    page.goto(f"{console.url}/login/")
    found = {"/login/": axe_violations(page)}
    sign_in(page, console)
    for name, path in PAGES:
        url = console.url + path.format(slug=slug)
        if name == "not-found":
            errors.expect_status(url, 404)
        page.goto(url)
        found[path] = axe_violations(page)
    return {path: lines for path, lines in found.items() if lines}


def test_axe_finds_nothing_on_the_working_pages(
    browser: Browser, live_console: LiveConsole, cast: Cast, browser_errors: BrowserErrors
) -> None:
    slug = _usage_and_logs(cast, live_console)
    for width, height in WIDTHS:
        context = browser.new_context(viewport={"width": width, "height": height})
        try:
            found = _sweep(context, live_console, slug, browser_errors)
            assert found == {}, f"at {width}px"
        finally:
            context.close()
