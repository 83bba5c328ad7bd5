"""The query explorer at / (issue 10, item 6), in Chromium against gunicorn over the demo.

What the page draws is checked against what the API answers for the URL the page shows, and
that URL against one written out by hand from the choices made.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from tests.e2e.conftest import ARTIFACTS, open_context
from tests.e2e.layout import WIDTHS, assert_layout_holds

EXPECTED_PATH = ("/api/query?start=24h-ago&m=max:10m-avg-zero:sys.cpu.user{host=web01}"
                 "&m=avg:10m-avg:rate:http.requests{host=web01,status=200}&global_annotations")


def subquery(page: Any, n: int) -> Any:
    return page.locator("#subqueries .subquery").nth(n - 1)


def field(page: Any, n: int, label: str) -> Any:
    return subquery(page, n).get_by_label(label, exact=True)


def wait_for_run(page: Any) -> None:
    page.locator("#chart-summary").filter(has_text=re.compile(r"series|No data")).wait_for()


def label_of(result: dict[str, Any]) -> str:
    pairs = ",".join(f"{k}={v}" for k, v in result["tags"].items())
    return f"{result['metric']}{{{pairs}}}" if pairs else str(result["metric"])


def open_home(page: Any, base_url: str, query: str = "") -> None:
    page.goto(f"{base_url}/{query}")
    wait_for_run(page)


def test_status_strip(page: Any, live_server: str) -> None:
    open_home(page, live_server)
    metrics = requests.get(f"{live_server}/api/suggest", timeout=10,
                           params={"type": "metrics", "max": 100000}).json()
    tagks = requests.get(f"{live_server}/api/suggest", timeout=10,
                         params={"type": "tagk", "max": 100000}).json()
    assert int(page.locator("#status-metrics").inner_text().replace(",", "")) == len(metrics)
    assert int(page.locator("#status-tagk").inner_text().replace(",", "")) == len(tagks)
    storage = page.locator("#status-storage").inner_text()
    assert storage.startswith("sqlite /") and storage.endswith("/demo.db")
    assert re.fullmatch(r"[\d,]+ since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
                        page.locator("#status-points").inner_text())
    version = requests.get(f"{live_server}/api/version", timeout=10).json()["pytsd_version"]
    assert version in page.locator("#status-strip").inner_text()
    for name, path in [("Annotations", "/annotations"), ("Docs", "/docs/"),
                       ("Stats", "/api/stats")]:
        assert page.get_by_role("navigation").get_by_role("link", name=name).get_attribute(
            "href") == path


def test_build_run_copy_and_restore_a_query(page: Any, live_server: str) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server)
    open_home(page, live_server)
    aggregators = requests.get(f"{live_server}/api/aggregators", timeout=10).json()
    assert field(page, 1, "Aggregator").locator("option").all_inner_texts() == sorted(aggregators)

    # Sub-query 1 through the suggestions, as a user types it.
    field(page, 1, "Metric").fill("sys.cpu.u")
    # Locators, not wait_for_function: that evaluates a string, which the page's CSP forbids.
    page.locator("#metric-suggestions option[value='sys.cpu.user']").wait_for(state="attached")
    field(page, 1, "Metric").fill("sys.cpu.user")
    field(page, 1, "Tags").fill("ho")
    page.locator("#q1-tag-suggestions option[value='host=']").wait_for(state="attached")
    field(page, 1, "Tags").fill("host=web01")
    field(page, 1, "Aggregator").select_option("max")
    field(page, 1, "Downsample").fill("10m")
    field(page, 1, "Downsample by").select_option("avg")
    field(page, 1, "Fill").select_option("zero")
    page.get_by_role("button", name="Add sub-query").click()
    assert page.evaluate("document.activeElement.id") == "q2-metric"
    field(page, 2, "Metric").fill("http.requests")
    field(page, 2, "Tags").fill("host=web01, status=200")
    field(page, 2, "Downsample").fill("10m")
    field(page, 2, "Rate").check()
    page.get_by_label("Range").select_option("24h")
    page.get_by_role("button", name="Run query").click()
    page.locator("#api-url").filter(has_text="http.requests").wait_for()
    wait_for_run(page)

    assert page.locator("#api-url").inner_text() == f"{live_server}{EXPECTED_PATH}"
    curl = f"curl -sg '{live_server}{EXPECTED_PATH}'"
    assert page.locator("#api-curl").inner_text() == curl
    results = requests.get(f"{live_server}{EXPECTED_PATH}", timeout=30).json()
    assert [r["metric"] for r in results] == ["sys.cpu.user", "http.requests"]

    # The chart draws what the API answers: the series, their points and their notes.
    lines = page.locator("#chart path.line")
    assert lines.count() == 2
    assert page.locator("#chart-legend li").all_inner_texts() == [
        *(label_of(r) for r in results), "Global note"]
    for i, result in enumerate(results):
        path = lines.nth(i).get_attribute("d")
        assert path.count("L") + 1 == sum(v is not None for v in result["dps"].values())
    series_notes = {n["description"] for r in results for n in r.get("annotations", [])}
    global_notes = {n["description"] for n in results[0]["globalAnnotations"]}
    assert {"CPU spike on web01", "Kernel upgrade"} <= series_notes
    assert {"Deploy v1.2.3", "Deploy v1.2.4"} <= global_notes
    # Note labels sit in a band above the plot: none covers a line.
    frame_top = page.evaluate("document.querySelector('#chart rect.frame').getBBox().y")
    label_bottoms = page.eval_on_selector_all(
        "#chart text.label", "nodes => nodes.map(n => n.getBBox().y + n.getBBox().height)")
    assert label_bottoms and max(label_bottoms) <= frame_top
    drawn = page.locator("#chart g.note title").all_text_contents()
    assert sorted(drawn) == sorted(series_notes | global_notes)
    assert page.locator("#chart g.note-series").count() == len(series_notes)

    # Copy the curl command, and the URL: absolute, so it works pasted anywhere.
    page.get_by_role("button", name="Copy the curl command").click()
    page.locator("#copy-status").filter(has_text="Copied.").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == curl
    page.get_by_role("button", name="Copy the URL").click()
    assert page.evaluate("navigator.clipboard.readText()") == f"{live_server}{EXPECTED_PATH}"

    # The address keeps the query: a reload (or a shared link) brings it back.
    params = parse_qs(urlsplit(page.url).query)
    assert params["m"] == ["max:10m-avg-zero:sys.cpu.user{host=web01}",
                           "avg:10m-avg:rate:http.requests{host=web01,status=200}"]
    page.reload()
    page.locator("#api-url").filter(has_text="http.requests").wait_for()
    assert page.locator("#subqueries .subquery").count() == 2
    assert field(page, 1, "Aggregator").input_value() == "max"
    assert field(page, 1, "Fill").input_value() == "zero"
    assert field(page, 2, "Rate").is_checked()
    assert field(page, 2, "Tags").input_value() == "host=web01,status=200"
    assert page.locator("#api-url").inner_text() == f"{live_server}{EXPECTED_PATH}"

    # Removing a sub-query; the last one cannot be removed.
    page.get_by_role("button", name="Remove sub-query 2").click()
    assert page.locator("#subqueries .subquery").count() == 1
    assert subquery(page, 1).get_by_role("button", name=re.compile("Remove")).is_hidden()


def test_a_note_on_the_chart_opens_in_the_annotation_manager(page: Any, live_server: str) -> None:
    open_home(page, live_server, "?range=24h&m=sum:10m-avg:sys.cpu.user{host=web01}")
    page.locator("#chart g.note", has_text="Kernel upgrade").locator("rect.hit").click()
    page.wait_for_url(re.compile(r"/annotations\?"))
    assert parse_qs(urlsplit(page.url).query)["q"] == ["Kernel upgrade"]
    page.locator("#notes-body tr", has_text="Kernel upgrade").wait_for()


def test_bad_queries_say_what_is_wrong(page: Any, live_server: str,
                                       console_errors: list[str]) -> None:
    open_home(page, live_server, "?range=24h&m=sum:10m-avg:sys.cpu.user{host=web01}")
    assert page.locator("#chart path.line").count() == 1
    field(page, 1, "Downsample").fill("ten")
    page.get_by_role("button", name="Run query").click()
    assert page.locator("#query-errors li").all_inner_texts() == [
        "Downsample “ten” is not an interval like 30s, 1m or 1h."]
    assert field(page, 1, "Downsample").get_attribute("aria-invalid") == "true"
    field(page, 1, "Downsample").fill("")
    field(page, 1, "Metric").fill("no.such.metric")
    page.get_by_role("button", name="Run query").click()
    page.locator("#query-errors li").filter(has_text="no.such.metric").wait_for()
    assert page.locator("#query-errors li").all_inner_texts() == [
        "No such name for 'metrics': 'no.such.metric'"]
    assert page.locator("#chart-summary").inner_text() == "The query failed: see the message above."
    # Nothing of the previous answer stays drawn under the error.
    assert page.locator("#chart").get_attribute("height") == "0"
    assert page.locator("#chart path, #chart circle").count() == 0
    assert page.locator("#chart-legend li").count() == 0
    # The browser logs the refused request (400); that one is expected.
    console_errors[:] = [e for e in console_errors if "status of 400" not in e]


# --- the explorer as a daily tool (issue 29) -------------------------------------------------

DAY_S = 1_714_953_600  # 2024-05-06 00:00:00 UTC: a day of the past no other test writes in
HOUR_S = 3600


@pytest.fixture(scope="module")
def tools_metric(live_server: str) -> str:
    """A metric of three hosts over DAY_S: a = h and b = 100 + h at each hour h, and c one
    point alone, 50 at 12:00 (values written here by hand, read back by the tests)."""
    metric = f"e2e.tools.{uuid.uuid4().hex[:6]}"
    points = [{"metric": metric, "timestamp": DAY_S + h * HOUR_S, "value": value,
               "tags": {"host": host}}
              for h in range(24) for host, value in (("a", h), ("b", 100 + h))]
    points.append({"metric": metric, "timestamp": DAY_S + 12 * HOUR_S, "value": 50,
                   "tags": {"host": "c"}})
    response = requests.post(f"{live_server}/api/put", json=points, timeout=30)
    assert response.status_code == 204, response.text
    return metric


@pytest.fixture
def sized_page(browser: Any, console_errors: list[str], request: Any) -> Iterator[Any]:
    context, page = open_context(browser, console_errors,
                                 viewport={"width": request.param, "height": 900})
    yield page
    context.close()
    assert console_errors == [], f"the page logged errors: {console_errors}"


def plot_box(page: Any) -> dict[str, float]:
    """The plot area (the frame rect) in page pixels."""
    box = page.locator("#chart rect.frame").bounding_box()
    assert box is not None
    return dict(box)


def x_of(page: Any, hour: float) -> float:
    box = plot_box(page)
    return float(box["x"] + box["width"] * hour / 24)


def hover_rows(page: Any) -> dict[str, str]:
    rows = page.locator("#chart-values .value-row")
    return {rows.nth(i).locator(".value-name").inner_text(): rows.nth(i).locator(
        ".value").inner_text() for i in range(rows.count())}


def day_query(metric: str) -> str:
    return (f"?start={DAY_S * 1000}&end={(DAY_S + 86400) * 1000}&tz=utc"
            f"&m=avg:{metric}{{host=*}}")


@pytest.mark.parametrize("sized_page", WIDTHS, indirect=True)
def test_explorer_daily_tools(sized_page: Any, live_server: str, tools_metric: str) -> None:
    page = sized_page
    width = page.viewport_size["width"]
    open_home(page, live_server, day_query(tools_metric))
    assert page.locator("#chart-summary").inner_text().startswith("3 series, 49 points")
    labels = [f"{tools_metric}{{host={h}}}" for h in "abc"]

    # A point alone is a dot (a path of one move would draw nothing), inside the plot.
    assert page.locator("#chart path.line").count() == 2
    dot = page.locator(f"#chart circle.dot[data-series='{labels[2]}']")
    assert dot.count() == 1
    box, plot = dot.bounding_box(), plot_box(page)
    assert box is not None and box["width"] >= 6
    assert plot["x"] <= box["x"] and box["x"] + box["width"] <= plot["x"] + plot["width"] + 4
    assert abs(box["x"] + box["width"] / 2 - x_of(page, 12)) < 1.5
    assert_layout_holds(page, tables_fit=width > 1000)

    # Hover: a crosshair and every series' value at that time.
    page.locator("#chart-legend").scroll_into_view_if_needed()
    page.mouse.move(x_of(page, 12), plot_box(page)["y"] + 40)
    tooltip = page.locator("#chart-values")
    assert tooltip.is_visible()
    assert tooltip.locator("strong").inner_text() == "2024-05-06 12:00:00"
    assert hover_rows(page) == {labels[0]: "12", labels[1]: "112", labels[2]: "50"}
    assert page.locator("#chart line.crosshair").count() == 1
    assert page.locator("#chart circle.hover-dot").count() == 3
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"explorer-hover-{width}.png"))
    page.mouse.move(x_of(page, 3.1), plot_box(page)["y"] + 40)
    tooltip.locator("strong").filter(has_text="03:00:00").wait_for()
    # c has one point: its value is given with its own time.
    assert hover_rows(page) == {labels[0]: "3", labels[1]: "103",
                                labels[2]: "50 at 2024-05-06 12:00:00"}
    page.mouse.move(1, 1)
    assert tooltip.is_hidden()

    # Legend: a click shows that series alone, a second click all; Ctrl+click hides one.
    legend = page.locator("#chart-legend")
    legend.get_by_role("button", name=labels[0]).click()
    assert page.locator("#chart path.line").count() == 1
    assert page.locator("#chart circle.dot").count() == 0
    assert [legend.get_by_role("button", name=label).get_attribute("aria-pressed")
            for label in labels] == ["true", "false", "false"]
    legend.get_by_role("button", name=labels[0]).click()
    assert page.locator("#chart path.line").count() == 2
    legend.get_by_role("button", name=labels[1]).click(modifiers=["Control"])
    assert page.locator("#chart path.line").count() == 1
    assert page.locator("#chart circle.dot").count() == 1
    assert legend.get_by_role("button", name=labels[1]).get_attribute("aria-pressed") == "false"
    legend.get_by_role("button", name=labels[1]).click(modifiers=["Control"])
    assert page.locator("#chart path.line").count() == 2

    # The table view: one row per time, one column per series, in the address too.
    page.get_by_role("button", name="Table").click()
    table = page.locator("#points-table")
    assert table.locator("thead th").all_inner_texts() == ["Time", *labels]
    assert table.locator("tbody tr").count() == 24
    noon = table.locator("tbody tr", has_text="2024-05-06 12:00:00")
    assert noon.locator("td").all_inner_texts() == ["12", "112", "50"]
    assert table.locator("tbody tr").first.locator("td").all_inner_texts() == ["0", "100", ""]
    assert parse_qs(urlsplit(page.url).query)["view"] == ["table"]
    assert_layout_holds(page, tables_fit=width > 1000)
    page.get_by_role("button", name="Chart").click()
    assert page.locator("#table-view").is_hidden()

    page.locator("#chart-legend").scroll_into_view_if_needed()
    # Drag to zoom: 06:00 to 18:00 becomes the range, in the fields, the address and the API.
    y = plot_box(page)["y"] + 60
    page.mouse.move(x_of(page, 6), y)
    page.mouse.down()
    page.mouse.move(x_of(page, 12), y)
    assert page.locator("#chart rect.zoom-band").count() == 1
    page.mouse.move(x_of(page, 18), y)
    page.mouse.up()
    page.locator("#chart-summary").filter(has_text=re.compile("from 2024-05-06 0[56]")).wait_for()
    start_ms = int(parse_qs(urlsplit(page.url).query)["start"][0])
    end_ms = int(parse_qs(urlsplit(page.url).query)["end"][0])
    one_px_ms = 86_400_000 / plot_box(page)["width"]
    assert abs(start_ms - (DAY_S + 6 * HOUR_S) * 1000) <= 2 * one_px_ms
    assert abs(end_ms - (DAY_S + 18 * HOUR_S) * 1000) <= 2 * one_px_ms
    assert page.get_by_label("Range").input_value() == "custom"
    assert page.get_by_label("From", exact=True).input_value() == datetime.fromtimestamp(
        start_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S") + (f".{start_ms % 1000:03d}"
                                                               if start_ms % 1000 else "")
    assert f"start={start_ms}&end={end_ms}&" in page.locator("#api-url").inner_text()
    assert page.locator("#chart-summary").inner_text().startswith("3 series, 2")
    assert page.get_by_role("button", name="Reset zoom").is_visible()

    # Back: the day again (the page stays; the previous query is restored and run).
    page.go_back()
    page.locator("#chart-summary").filter(has_text="49 points").wait_for()
    assert page.get_by_label("From", exact=True).input_value() == "2024-05-06 00:00:00"
    page.screenshot(path=str(ARTIFACTS / f"explorer-{width}.png"), full_page=True)
    assert parse_qs(urlsplit(page.url).query)["start"] == [str(DAY_S * 1000)]
    assert page.get_by_role("button", name="Reset zoom").is_hidden()

    # Reset zoom after a zoom: the range before it.
    page.mouse.move(x_of(page, 2), y)
    page.mouse.down()
    page.mouse.move(x_of(page, 4), y)
    page.mouse.up()
    page.locator("#chart-summary").filter(has_text=re.compile("from 2024-05-06 0[12]")).wait_for()
    page.get_by_role("button", name="Reset zoom").click()
    page.locator("#chart-summary").filter(has_text="49 points").wait_for()
    assert page.get_by_label("From", exact=True).input_value() == "2024-05-06 00:00:00"


def test_back_restores_the_previous_query(page: Any, live_server: str, tools_metric: str) -> None:
    open_home(page, live_server, day_query(tools_metric))
    first = page.locator("#api-url").inner_text()
    field(page, 1, "Tags").fill("host=a")
    field(page, 1, "Aggregator").select_option("max")
    page.get_by_role("button", name="Run query").click()
    page.locator("#chart-summary").filter(has_text="1 series").wait_for()
    second = page.url
    page.go_back()
    page.locator("#chart-summary").filter(has_text="3 series").wait_for()
    assert field(page, 1, "Tags").input_value() == "host=*"
    assert field(page, 1, "Aggregator").input_value() == "avg"
    assert page.locator("#api-url").inner_text() == first
    page.go_forward()
    page.locator("#chart-summary").filter(has_text="1 series").wait_for()
    assert page.url == second and field(page, 1, "Tags").input_value() == "host=a"


def test_changing_the_range_runs_the_query(page: Any, live_server: str) -> None:
    open_home(page, live_server, "?range=24h&m=sum:10m-avg:sys.cpu.user{host=web01}")
    page.get_by_label("Range").select_option("1h")
    page.locator("#api-url").filter(has_text="start=1h-ago").wait_for()
    assert parse_qs(urlsplit(page.url).query)["range"] == ["1h"]
    page.get_by_label("From", exact=True).fill("2024-05-06 00:00:00")
    page.get_by_label("To", exact=True).fill("2024-05-07 00:00:00")
    page.get_by_label("To", exact=True).press("Tab")
    page.locator("#api-url").filter(has_text=f"start={DAY_S * 1000}").wait_for()


def test_auto_refresh_runs_again(page: Any, live_server: str) -> None:
    page.clock.install()
    open_home(page, live_server, "?range=1h&m=sum:1m-avg:sys.cpu.user{host=web01}")
    runs: list[str] = []
    page.on("request", lambda r: runs.append(r.url) if "/api/query?" in r.url else None)
    page.get_by_label("Refresh").select_option("30s")
    assert parse_qs(urlsplit(page.url).query)["refresh"] == ["30s"]
    page.clock.run_for(29_000)
    assert runs == []
    page.clock.run_for(2_000)
    page.wait_for_timeout(300)
    assert len(runs) == 1 and "start=1h-ago" in runs[0]
    page.clock.run_for(30_000)
    page.wait_for_timeout(300)
    assert len(runs) == 2
    page.get_by_label("Refresh").select_option("")
    page.clock.run_for(60_000)
    page.wait_for_timeout(300)
    assert len(runs) == 2


def test_tag_suggestions_follow_the_key_and_the_metric(page: Any, live_server: str,
                                                       tools_metric: str) -> None:
    open_home(page, live_server, day_query(tools_metric))
    tags = field(page, 1, "Tags")
    options = page.locator("#q1-tag-suggestions option")
    tags.fill("")
    tags.fill("h")
    options.first.wait_for(state="attached")
    assert [o.get_attribute("value") for o in options.all()] == ["host="]
    tags.fill("host=")
    page.locator("#q1-tag-suggestions option[value='host=c']").wait_for(state="attached")
    assert [o.get_attribute("value") for o in options.all()] == ["host=a", "host=b", "host=c"]
    # Another metric: its keys and values only (the demo's dc values, not hosts or ifaces).
    field(page, 1, "Metric").fill("sys.cpu.user")
    tags.fill("dc=")
    page.locator("#q1-tag-suggestions option[value='dc=lga']").wait_for(state="attached")
    values = [o.get_attribute("value") for o in options.all()]
    assert values and all(v in ("dc=lga", "dc=sjc") for v in values)
    tags.fill("dc=lga, host=")
    page.locator("#q1-tag-suggestions option[value='dc=lga, host=web01']").wait_for(
        state="attached")
    lookup = requests.get(f"{live_server}/api/search/lookup", timeout=10,
                          params={"m": "sys.cpu.user{dc=lga}", "limit": 1000}).json()
    expected = sorted({r["tags"]["host"] for r in lookup["results"]})
    assert [o.get_attribute("value") for o in options.all()] == [
        f"dc=lga, host={h}" for h in expected]


def test_a_first_visit_shows_the_newest_metric_even_one_point(page: Any,
                                                             live_server: str) -> None:
    # The README's first put: one point of a new metric, then the explorer.
    metric = f"e2e.first.{uuid.uuid4().hex[:6]}"
    response = requests.post(f"{live_server}/api/put", timeout=10, json={
        "metric": metric, "timestamp": int(time.time()) - 60, "value": 42,
        "tags": {"host": "me"}})
    assert response.status_code == 204, response.text
    open_home(page, live_server)
    assert field(page, 1, "Metric").input_value() == metric
    assert page.locator("#api-url").inner_text() == (
        f"{live_server}/api/query?start=24h-ago&m=avg:5m-avg:{metric}&global_annotations")
    assert page.locator("#chart-summary").inner_text().startswith("1 series, 1 point,")
    dot = page.locator("#chart circle.dot")
    assert dot.count() == 1 and dot.is_visible()
