"""End-to-end fixtures: a real gunicorn server over a temporary store, and a real browser.

``live_server`` (session): loads the demo data set into a fresh SQLite store, starts
``gunicorn wsgi:application`` on a free port as a subprocess, yields its base URL and stops
it afterwards. ``browser`` (session) is Debian's Chromium driven by Playwright; ``page`` is a
fresh context per test (UTC, a fixed viewport) whose console errors fail the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.tsd_process import free_port, stop_process_group

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path(os.environ.get("TSD_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = ROOT / "test-artifacts"
START_TIMEOUT_S = 30.0


def wait_until_responds(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}:\n{log.read_text()}")
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:  # not listening yet, or still booting
            pass
        time.sleep(0.2)
    raise RuntimeError(f"gunicorn did not answer {url} in {START_TIMEOUT_S} s:\n"
                       f"{log.read_text()}")


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``tsd.storage`` URL of a SQLite store holding the demo data set (a day ending now)."""
    from app.tsdb.demo import load_demo
    from tests.conftest import make_tsdb

    url = f"sqlite:///{tmp_path_factory.mktemp('e2e') / 'demo.db'}"
    tsdb = make_tsdb({"tsd.storage": url, "tsd.core.auto_create_metrics": True})
    load_demo(tsdb)
    tsdb.close()
    return url


@contextmanager
def serve(store_url: str, log_dir: Path, extra_env: dict[str, str] | None = None
          ) -> Iterator[str]:
    """Run gunicorn (2 workers) over ``store_url`` on a free port; yield its base URL."""
    port = free_port()
    log = log_dir / "gunicorn.log"
    env = {**os.environ, "TSD_STORAGE": store_url, "GUNICORN_CMD_ARGS": "",
           "TSD_CORE_AUTO_CREATE_METRICS": "true",
           "PYTHONPATH": str(ROOT), **(extra_env or {})}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "wsgi:application", "--config",
             str(ROOT / "gunicorn.conf.py"), "--bind", f"127.0.0.1:{port}", "--workers", "2",
             "--access-logfile", "-"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until_responds(f"{base_url}/", process, log)
        yield base_url
    finally:
        stop_process_group(process)


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
    context.close()
    assert console_errors == [], f"the page logged errors: {console_errors}"
