"""The pages as a new user first sees them (the README's screenshots), on a server of its own
with fresh demo data and ``tsd.ui.grafana_url`` set, and the links into Grafana's Explore.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.e2e.conftest import ARTIFACTS, serve

GRAFANA = "http://grafana.example:3000"


@pytest.fixture(scope="module")
def grafana_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from app.tsdb.demo import load_demo
    from tests.conftest import make_tsdb

    folder = tmp_path_factory.mktemp("fresh")
    url = f"sqlite:///{folder / 'demo.db'}"
    tsdb = make_tsdb({"tsd.storage": url, "tsd.core.auto_create_metrics": True})
    load_demo(tsdb)
    tsdb.close()
    with serve(url, folder, {"TSD_UI_GRAFANA_URL": f"{GRAFANA}/"}) as base_url:
        yield base_url


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
    page.screenshot(path=str(ARTIFACTS / "home.png"))


def test_annotation_manager_first_visit(page: Any, grafana_server: str) -> None:
    page.goto(f"{grafana_server}/annotations?range=24h&tz=utc")
    page.get_by_role("status").filter(has_text="Showing 5 notes").wait_for()
    assert page.locator("#grafana-link").is_hidden()  # no series chosen: nothing to open
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "annotations.png"), full_page=True)

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
