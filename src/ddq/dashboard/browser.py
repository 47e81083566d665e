"""Headless Chromium on the dashboard, driven by Playwright: for the browser test and `ddq bench dashboard`.

Uses the system's Chromium (Debian's `chromium` package, or $DDQ_CHROMIUM),
never a browser downloaded by Playwright. The flags keep it from reaching
for Google's services, which a closed network refuses.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--no-first-run", "--disable-sync", "--disable-quic"]


def chromium_path() -> str:
    found = os.environ.get("DDQ_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise RuntimeError("no Chromium: install Debian's `chromium` package (apt-get install chromium) "
                           "or set DDQ_CHROMIUM to a Chromium binary")
    return found


@contextlib.contextmanager
def open_page(url: str, width: int = 1400, height: int = 1000) -> Iterator:
    """A Playwright page showing `url`; `page.problems` collects console errors and uncaught exceptions."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            problems: list[str] = []
            page.problems = problems  # type: ignore[attr-defined]  # the tests read it off the page

            def console(message: Any) -> None:
                if message.type == "error":
                    problems.append(message.text)

            def uncaught(error: Any) -> None:
                problems.append(f"uncaught: {error}")

            page.on("console", console)
            page.on("pageerror", uncaught)
            page.goto(url)
            yield page
        finally:
            browser.close()
