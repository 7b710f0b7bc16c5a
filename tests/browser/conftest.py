"""A live console for browser tests: uvicorn (ASGI, so streaming works) and a Celery worker as
real subprocesses against the test database, and Debian's Chromium driven by Playwright.

The subprocesses bind free loopback ports and are stopped in teardown. Tests that use them
need committed data: mark them ``django_db(transaction=True)``.

Every page any test opens is watched (``browser_errors``): a console error, an uncaught
exception or a Content-Security-Policy violation fails the test that caused it, listed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Error, Page, Response

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = REPO / "artifacts" / "screenshots"


@pytest.fixture(scope="session")
def browser_type_launch_args(_orm_beside_playwright: None) -> dict[str, Any]:
    """pytest-playwright launches Debian's Chromium (Playwright cannot download one here)."""
    return {
        "executable_path": CHROMIUM,
        "args": ["--disable-gpu", "--disable-quic", "--no-sandbox"],
    }


@pytest.fixture(scope="session", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    # Playwright's sync API runs an event loop in this thread; Django would then refuse ORM
    # calls (and test-database set-up) as "async unsafe". They are plain sequential code here.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if before is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


# Reports each violation the page sees in the console, where the watch below finds it: Chromium
# logs its own message too, but this one names the directive and the blocked source, and it also
# reports violations of a report-only policy. Init scripts run outside the page's CSP.
_REPORT_CSP_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => console.error(
  `CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"} at ` +
  `${e.sourceFile}:${e.lineNumber}:${e.columnNumber} (${e.disposition})`));
"""


@dataclass
class BrowserErrors:
    """What went wrong in the pages of one test, as readable lines."""

    seen: list[str] = field(default_factory=list)
    open: list[BrowserContext] = field(default_factory=list)
    # Answers of 4xx/5xx, listed beside the errors: Chromium's "Failed to load resource" does
    # not say which request failed.
    refused_requests: list[str] = field(default_factory=list)
    expected_statuses: set[tuple[str, int]] = field(default_factory=set)

    def expect_status(self, url: str, status: int) -> None:
        """The test opens ``url`` knowing it answers ``status`` (it checks the 404 page itself).
        Chromium logs a document's own 4xx as a failed load; at that address, that one is not
        an error of the page. Nothing else there is excused."""
        self.expected_statuses.add((url, status))

    def watch(self, context: BrowserContext) -> None:
        self.open.append(context)
        context.on("close", self._closed)
        context.add_init_script(script=_REPORT_CSP_VIOLATIONS)
        context.on("console", self._console)
        context.on("weberror", lambda error: self._error(error.error, error.page))
        context.on("response", self._response)

    def _closed(self, context: BrowserContext) -> None:
        self.open.remove(context)

    def _console(self, message: ConsoleMessage) -> None:
        if self._expected(message):
            return
        csp = "Content Security Policy" in message.text or "CSP violation" in message.text
        if message.type == "error" or csp:
            page = message.page.url if message.page else "a page"
            source = message.location.get("url", "")
            where = page if source in ("", page) else f"{page} (from {source})"
            self.seen.append(f"console {message.type} on {where}: {message.text}")

    def _expected(self, message: ConsoleMessage) -> bool:
        page = message.page.url if message.page else ""
        return any(
            page == url
            and message.text.startswith("Failed to load resource: ")
            and f"responded with a status of {status} " in message.text
            for url, status in self.expected_statuses
        )

    def _response(self, response: Response) -> None:
        if response.status >= 400:
            request = response.request
            self.refused_requests.append(f"{response.status} for {request.method} {response.url}")

    def _error(self, error: Error, page: Page | None) -> None:
        where = page.url if page is not None else "a page"
        self.seen.append(f"uncaught error on {where}: {error.message}")


@pytest.fixture(autouse=True)
def browser_errors(request: pytest.FixtureRequest) -> Iterator[BrowserErrors]:
    """Fails the test when any page it opened logged a console error, threw, or broke the CSP.

    Browser-wide: every context a test makes (pytest-playwright's ``page``, or its own
    ``browser.new_context()``) is watched from its creation, before its first page loads.
    """
    if "browser" not in request.fixturenames:
        yield BrowserErrors()  # a test that opens no browser has nothing to watch
        return
    browser: Browser = request.getfixturevalue("browser")
    errors = BrowserErrors()
    browser.on("context", errors.watch)
    yield errors
    browser.remove_listener("context", errors.watch)
    for context in list(errors.open):  # left open by the test; closing delivers late events
        context.close()
    if errors.seen:
        answers = "\n".join(errors.refused_requests) or "none"
        listing = "\n".join(errors.seen)
        pytest.fail(f"the browser reported errors:\n{listing}\nrequests refused:\n{answers}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LiveConsole:
    url: str
    run_dir: Path
    logs: Path

    def diagnostics(self, lines: int = 40) -> str:
        """The tails of the server's, the worker's and every engine's log, for a failure."""
        paths = sorted(self.logs.glob("*.log")) + sorted(self.run_dir.rglob("*.log"))
        parts = []
        for path in paths:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)


def at_rest(deployment_id: object, timeout: float = 60.0) -> None:
    """Wait until the live worker has acted on an endpoint's last change and left it at rest
    (stopped or scaled to zero, nothing running, no pass due).

    A test that writes into the endpoint's run directory waits for this first: otherwise the
    worker may still be acting on the create, starting an engine that writes the very log file
    the test wrote, or stopping one after the test looked.
    """
    from django.db.models import F

    from deployments.endpoints.models import Deployment
    from tests.waiting import wait_until

    rest = Deployment.objects.filter(
        pk=deployment_id, observed_generation=F("generation"), next_reconcile_at__isnull=True
    )
    wait_until(rest.exists, f"endpoint {deployment_id} at rest", timeout)


def _environment(db_name: str, tmp: Path) -> dict[str, str]:
    db = settings.DATABASES["default"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db_name}",
        REDIS_URL=settings.REDIS_URL,
        PLINTH_ENV="test",
        PLINTH_DEBUG="false",
        PLINTH_DATA_DIR=str(tmp / "data"),
        PLINTH_LOCAL_RUN_DIR=str(tmp / "local"),
        # The console checks the key and calls the endpoint's router itself, so these tests
        # need no gateway process (the gateway has its own tests).
        PLINTH_PLAYGROUND_UPSTREAM="router",
        PLINTH_SIM_TIME_SCALE="50",
        PLINTH_SIM_COLD_START="0",  # engines ready at once, not in their modelled time
        # Quick passes so an endpoint comes up in seconds (beat runs inside the worker).
        PLINTH_SWEEP_INTERVAL_S="1",
        PLINTH_RECONCILE_INTERVAL_S="1",
        PLINTH_PROBE_INTERVAL_S="2",
        PLINTH_LOCAL_STOP_GRACE_S="2",
        PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S="1",
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return env


def _wait_for(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server did not answer: {log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="module")
def live_console_port() -> int:
    """The console's port; a module overrides it to know the address before the console starts
    (to register it at an identity provider, tests/browser/test_sso_sign_in.py)."""
    return free_port()


@pytest.fixture(scope="module")
def live_console_env() -> dict[str, str]:
    """More environment for the console and its worker; a module overrides it."""
    return {}


@pytest.fixture(scope="module")
def live_console(
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
    live_console_port: int,
    live_console_env: dict[str, str],
) -> Iterator[LiveConsole]:
    tmp = tmp_path_factory.mktemp("console")
    env = {**_environment(settings.DATABASES["default"]["NAME"], tmp), **live_console_env}
    port = live_console_port
    logs = tmp / "logs"
    logs.mkdir()
    (tmp / "data").mkdir()
    web_log, worker_log = logs / "uvicorn.log", logs / "celery.log"
    bin_dir = Path(sys.executable).parent
    web = subprocess.Popen(
        [str(bin_dir / "uvicorn"), "controlplane.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log"],
        cwd=REPO, env=env, stdout=web_log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    worker = subprocess.Popen(
        [str(bin_dir / "celery"), "-A", "controlplane", "worker", "--pool=solo",
         "--beat", "--without-heartbeat", "--without-gossip", "--without-mingle", "-Q",
         settings.CELERY_TASK_DEFAULT_QUEUE, "-l", "info"],
        cwd=REPO, env=env, stdout=worker_log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait_for(f"http://127.0.0.1:{port}/healthz", web, web_log)
        yield LiveConsole(f"http://127.0.0.1:{port}", tmp / "local", logs)
    finally:
        _stop(worker)
        _stop(web)
        stop_local_processes(tmp / "local")


def stop_local_processes(run_dir: Path) -> None:
    """Stop engines and routers the worker left behind (they outlive it by design)."""
    from deployments.drivers.local.processes import ProcessTable

    if not run_dir.is_dir():
        return
    for endpoint_dir in run_dir.iterdir():
        for record in ProcessTable(endpoint_dir).records():
            record.signal(15)
    time.sleep(0.5)
    for endpoint_dir in run_dir.iterdir():
        for record in ProcessTable(endpoint_dir).records():
            record.signal(9)
