"""The query explorer at / (issue 10, item 6), in Chromium against gunicorn over the demo.

What the page draws is checked against what the API answers for the URL the page shows, and
that URL against one written out by hand from the choices made.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

EXPECTED_PATH = ("/api/query?start=24h-ago&m=max:10m-avg-zero:sys.cpu.user{host=web01}"
                 "&m=sum:10m-avg:rate:http.requests{host=web01,status=200}&global_annotations")


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
    # A first visit runs a query at once: the first metric, summed on 5-minute averages.
    assert field(page, 1, "Metric").input_value() == metrics[0]
    assert page.locator("#api-url").inner_text() == (
        f"/api/query?start=24h-ago&m=sum:5m-avg:{metrics[0]}&global_annotations")


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

    assert page.locator("#api-url").inner_text() == EXPECTED_PATH
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
    drawn = page.locator("#chart g.note title").all_text_contents()
    assert sorted(drawn) == sorted(series_notes | global_notes)
    assert page.locator("#chart g.note-series").count() == len(series_notes)

    # Copy the curl command.
    page.get_by_role("button", name="Copy the curl command").click()
    page.locator("#copy-status").filter(has_text="Copied.").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == curl

    # The address keeps the query: a reload (or a shared link) brings it back.
    params = parse_qs(urlsplit(page.url).query)
    assert params["m"] == ["max:10m-avg-zero:sys.cpu.user{host=web01}",
                           "sum:10m-avg:rate:http.requests{host=web01,status=200}"]
    page.reload()
    page.locator("#api-url").filter(has_text="http.requests").wait_for()
    assert page.locator("#subqueries .subquery").count() == 2
    assert field(page, 1, "Aggregator").input_value() == "max"
    assert field(page, 1, "Fill").input_value() == "zero"
    assert field(page, 2, "Rate").is_checked()
    assert field(page, 2, "Tags").input_value() == "host=web01,status=200"
    assert page.locator("#api-url").inner_text() == EXPECTED_PATH

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
    open_home(page, live_server)
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
    # The browser logs the refused request (400); that one is expected.
    console_errors[:] = [e for e in console_errors if "status of 400" not in e]
