"""The pages as a new user first sees them (the README's screenshots), and the links into
Grafana's Explore.

The README's pictures come from ``default_server``: fresh demo data and default settings, as
``make run`` gives (no Grafana). ``make screenshots`` (``TSD_UPDATE_SCREENSHOTS=1``) writes them
into ``docs/images/``; otherwise they go to ``test-artifacts/`` only. The Grafana links are
checked on a server of their own with ``tsd.ui.grafana_url`` set.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.e2e.conftest import ARTIFACTS, ROOT, open_context, serve
from tests.e2e.tsd_process import demo_store_in

GRAFANA = "http://grafana.example:3000"
IMAGES = ROOT / "docs" / "images"


@pytest.fixture(scope="module")
def grafana_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("fresh")
    with serve(demo_store_in(folder), folder, {"TSD_UI_GRAFANA_URL": f"{GRAFANA}/"}) as base_url:
        yield base_url


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """What `make run` serves on a fresh clone: the demo, default settings."""
    folder = tmp_path_factory.mktemp("default")
    with serve(demo_store_in(folder), folder) as base_url:
        yield base_url


def keep_screenshot(page: Any, name: str, **options: Any) -> None:
    """Into test-artifacts/, and into docs/images/ under `make screenshots`."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), **options)
    if os.environ.get("TSD_UPDATE_SCREENSHOTS") == "1":
        shutil.copyfile(path, IMAGES / name)


def test_readme_screenshots_from_a_default_setup(browser: Any, default_server: str,
                                                 console_errors: list[str]) -> None:
    context, page = open_context(browser, console_errors,
                                 viewport={"width": 1280, "height": 1000})
    try:
        # A first visit: the newest metric, averaged; the pointer over the chart shows values.
        page.goto(f"{default_server}/?tz=utc")
        page.locator("#chart-summary").filter(has_text="series").wait_for()
        assert page.get_by_role("navigation").get_by_role("link", name="Grafana").count() == 0
        assert page.locator("#grafana-link").is_hidden()
        frame = page.locator("#chart rect.frame").bounding_box()
        assert frame is not None
        page.mouse.move(frame["x"] + frame["width"] * 0.62, frame["y"] + frame["height"] * 0.3)
        assert page.locator("#chart-values").is_visible()
        keep_screenshot(page, "home.png")

        page.goto(f"{default_server}/annotations?range=24h&tz=utc")
        page.get_by_role("status").filter(has_text="Showing 5 notes").wait_for()
        assert page.locator("#grafana-link").is_hidden()
        keep_screenshot(page, "annotations.png", full_page=True)
    finally:
        context.close()
    assert console_errors == []
    # The README shows exactly these two pictures.
    readme = (ROOT / "README.md").read_text()
    assert "](docs/images/home.png)" in readme and "](docs/images/annotations.png)" in readme
    assert {p.name for p in Path(IMAGES).glob("*.png")} >= {"home.png", "annotations.png"}


def explore_state(href: str) -> dict[str, Any]:
    parts = urlsplit(href)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{GRAFANA}/explore"
    query = parse_qs(parts.query)
    assert query["orgId"] == ["1"]
    return dict(json.loads(query["left"][0]))


def test_home_page(page: Any, grafana_server: str) -> None:
    page.goto(f"{grafana_server}/?range=24h&tz=utc&m=sum:5m-avg:sys.cpu.user{{host=*}}")
    page.locator("#chart-summary").filter(has_text="series").wait_for()
    assert page.locator("#chart path.line").count() == 6
    assert page.get_by_role("navigation").get_by_role("link", name="Grafana").get_attribute(
        "href") == GRAFANA
    state = explore_state(page.locator("#grafana-link").get_attribute("href"))
    assert state["queries"] == [{
        "refId": "A", "metric": "sys.cpu.user", "aggregator": "sum",
        "filters": [{"type": "wildcard", "tagk": "host", "filter": "*", "groupBy": True}],
        "disableDownsampling": False, "downsampleInterval": "5m",
        "downsampleAggregator": "avg", "downsampleFillPolicy": "none",
        "shouldComputeRate": False, "isCounter": False}]
    start_ms, end_ms = int(state["range"]["from"]), int(state["range"]["to"])
    assert end_ms - start_ms == 86_400_000
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "home-grafana.png"))


def test_annotation_manager_first_visit(page: Any, grafana_server: str) -> None:
    page.goto(f"{grafana_server}/annotations?range=24h&tz=utc")
    page.get_by_role("status").filter(has_text="Showing 5 notes").wait_for()
    assert page.locator("#grafana-link").is_hidden()  # no series chosen: nothing to open
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "annotations-grafana.png"), full_page=True)

    page.get_by_label("Metric").fill("sys.cpu.user")
    page.get_by_label("Tags").fill("host=web01, dc=lga|sjc")
    page.get_by_role("button", name="Show").click()
    page.locator("#chart path.line").wait_for()
    state = explore_state(page.locator("#grafana-link").get_attribute("href"))
    assert [q["metric"] for q in state["queries"]] == ["sys.cpu.user"]
    assert state["queries"][0]["filters"] == [
        {"type": "literal_or", "tagk": "host", "filter": "web01", "groupBy": True},
        {"type": "literal_or", "tagk": "dc", "filter": "lga|sjc", "groupBy": True}]
    start_ms, end_ms = int(state["range"]["from"]), int(state["range"]["to"])
    assert end_ms - start_ms == 86_400_000
    page.screenshot(path=str(ARTIFACTS / "annotations-series.png"), full_page=True)
