"""End-to-end fixtures: a real gunicorn server over a temporary store, and a real browser.

``live_server`` (session): loads the demo data set into a fresh SQLite store, starts
``gunicorn wsgi:application`` on a free port as a subprocess, yields its base URL and stops
it afterwards. ``browser`` (session) is Debian's Chromium driven by Playwright; ``page`` is a
fresh context per test (UTC, a fixed viewport) whose console errors fail the test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.tsd_process import demo_store_in, gunicorn_server

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("TSD_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``tsd.storage`` URL of a SQLite store holding the demo data set (a day ending now)."""
    return demo_store_in(tmp_path_factory.mktemp("e2e"))


@contextmanager
def serve(store_url: str, log_dir: Path, extra_env: dict[str, str] | None = None
          ) -> Iterator[str]:
    """Run gunicorn (2 workers) over ``store_url`` on a free port; yield its base URL."""
    env = {"TSD_STORAGE": store_url, "TSD_CORE_AUTO_CREATE_METRICS": "true", **(extra_env or {})}
    with gunicorn_server(env, log_dir / "gunicorn.log", args=("--access-logfile", "-"),
                         path="/") as tsd:
        yield tsd.url


@pytest.fixture(scope="session")
def live_server(demo_store: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL of a gunicorn server (2 workers) over the demo store; stopped at the end."""
    with serve(demo_store, tmp_path_factory.mktemp("gunicorn")) as base_url:
        yield base_url


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Debian's Chromium under Playwright (skipped locally when it is missing; never in CI)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the browser tests: {CHROMIUM} is missing")
        pytest.skip(f"browser tests need Chromium at {CHROMIUM} (scripts/install-browser.sh)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def console_errors() -> list[str]:
    """What the page logged as errors; a test expecting one (a refused request) removes it."""
    return []


def open_context(browser: Any, errors: list[str], **options: Any) -> tuple[Any, Any]:
    """A context (UTC, desktop viewport unless told) and its page, logging errors to errors."""
    settings = {"timezone_id": "UTC", "locale": "en-GB",
                "viewport": {"width": 1280, "height": 1000}, **options}
    context = browser.new_context(**settings)
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    return context, page


@pytest.fixture
def page(browser: Any, console_errors: list[str]) -> Iterator[Any]:
    """A fresh page in UTC with a desktop viewport; JavaScript errors fail the test."""
    context, page = open_context(browser, console_errors)
    yield page
    # A route handler still fetching (the page polls its status) would otherwise run after
    # the context is gone and fail the next test's setup.
    page.unroute_all(behavior="ignoreErrors")
    context.close()
    assert console_errors == [], f"the page logged errors: {console_errors}"
