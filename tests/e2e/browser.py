"""The browser the page tests drive: Debian's chromium (never Playwright's own download) through
Playwright, one per test module, and `Watched`, a page that records what it asked for and what its
console said. The fixtures `browser` and `watched` are registered in tests/e2e/conftest.py."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect, sync_playwright

from tests.helpers import unavailable

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
"""The machine's network is closed: nothing Chromium would fetch by itself is asked for."""
WAIT_MS = 60_000
"""The longest any expectation waits (both passes of `make test` share two cores, and a starved
node process can miss heartbeats for half a minute)."""
VIEWPORT: ViewportSize = {"width": 1200, "height": 900}


def chromium() -> str | None:
    return shutil.which("chromium") or next(
        (p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if Path(p).exists()), None
    )


class Watched:
    """A page with what it asked for and what its console said."""

    def __init__(
        self, browser: Browser, viewport: ViewportSize = VIEWPORT, permissions: list[str] | None = None
    ) -> None:
        self.context = browser.new_context(
            viewport=viewport,
            service_workers="block",
            permissions=permissions,
        )
        self.context.set_default_timeout(WAIT_MS)
        self.context.set_default_navigation_timeout(WAIT_MS)
        self.page: Page = self.context.new_page()
        self.urls: list[str] = []
        self.console: list[str] = []
        self.page.on("request", lambda request: self.urls.append(request.url))
        self.page.on("console", lambda message: self.console.append(f"{message.type}: {message.text}"))

    def close(self) -> None:
        self.context.close()

    def assert_clean(self, key: str) -> None:
        assert not [u for u in self.urls if key in u], "the key must never travel in an address"
        assert not [c for c in self.console if "Content Security Policy" in c], self.console
        assert not [u for u in self.urls if not u.startswith("http://127.0.0.1:")], (
            "nothing from another site"
        )


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium()
    if executable is None:
        unavailable("Debian's chromium is missing: run scripts/system-packages.sh (as root) to install it")
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        # launch() gives every browser a fresh, temporary profile (user-data dir) of its own.
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def watched(browser: Browser) -> Iterator[Watched]:
    page = Watched(browser)
    try:
        yield page
    finally:
        page.close()
