"""The annotation manager for daily use (issue 10, item 7), in Chromium against gunicorn.

Each test works in its own week in the past (no demo data there, no other test's notes), so
the tests share one server. Expected values are written out from what each test put in.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from tests.e2e.conftest import ARTIFACTS, open_context
from tests.e2e.layout import WIDTHS, assert_layout_holds, cut_selects, outside_their_panels

DAY_S = 86400


def week(n: int) -> int:
    """The start (s) of test n's private week (a gap after it), back from a Monday in 2024."""
    return 1_709_510_400 - n * 14 * DAY_S  # 2024-03-04 00:00:00 UTC, weeks 2 apart


def utc_text(ts_s: int) -> str:
    return datetime.fromtimestamp(ts_s, UTC).strftime("%Y-%m-%d %H:%M:%S")


def tag() -> str:
    return uuid.uuid4().hex[:6]


def put_note(base_url: str, start_s: int, description: str, tsuid: str = "",
             **extra: Any) -> dict[str, Any]:
    body = {"startTime": start_s, "description": description, **extra}
    if tsuid:
        body["tsuid"] = tsuid
    response = requests.put(f"{base_url}/api/annotation", json=body, timeout=10)
    assert response.status_code == 200, response.text
    return dict(response.json())


def get_note(base_url: str, start_s: int, tsuid: str = "") -> requests.Response:
    return requests.get(f"{base_url}/api/annotation", timeout=10,
                        params={"start_time": start_s, **({"tsuid": tsuid} if tsuid else {})})


def tsuid_of(base_url: str, host: str) -> str:
    response = requests.get(f"{base_url}/api/query", timeout=30, params={
        "start": "1d-ago", "m": f"sum:1h-avg:sys.cpu.user{{host={host}}}", "show_tsuids": ""})
    assert response.status_code == 200, response.text
    return str(response.json()[0]["tsuids"][0])


def open_week(page: Any, base_url: str, start_s: int, days: int = 7, extra: str = "") -> None:
    page.goto(f"{base_url}/annotations?start={start_s * 1000}"
              f"&end={(start_s + days * DAY_S) * 1000}&tz=utc{extra}")
    page.get_by_role("status").filter(has_text="Showing").wait_for()


def table_column(page: Any, index: int) -> list[str]:
    return list(page.locator(f"#notes-body tr td:nth-child({index})").all_inner_texts())


def test_default_view_shows_every_note_of_the_range(page: Any, live_server: str) -> None:
    # The demo's notes: three global ones and two on web01's CPU, none visible before only
    # because no metric was typed.
    page.goto(f"{live_server}/annotations")
    page.get_by_role("status").filter(has_text="Showing").wait_for()
    owners = table_column(page, 4)
    descriptions = table_column(page, 5)
    for text in ("Deploy v1.2.3", "Maintenance window", "Deploy v1.2.4"):
        assert owners[descriptions.index(text)] == "Global"
    for text in ("CPU spike on web01", "Kernel upgrade"):
        assert owners[descriptions.index(text)].startswith("sys.cpu.user{")
        assert "host=web01" in owners[descriptions.index(text)]
    assert "every series" in page.locator("#notes-caption").inner_text()
    # No series chosen: a timeline of the notes in lanes, not an empty 0-1 value axis.
    assert page.locator("#chart path.line").count() == 0
    lanes = page.locator("#chart text.lane-name").all_text_contents()
    assert lanes[0] == "Global" and any("host=web01" in lane for lane in lanes[1:])
    assert page.locator("#chart g.note", has_text="Kernel upgrade").count() == 1
    assert "timeline" in page.locator("#chart-summary").inner_text()


def test_a_range_without_notes_draws_nothing(page: Any, live_server: str) -> None:
    open_week(page, live_server, week(60))
    assert page.locator("#chart").get_attribute("height") == "0"
    assert page.locator("#chart text").count() == 0
    assert page.locator("#chart-summary").inner_text() == "No notes in this range."
    assert page.locator("#notes-empty").is_visible()


def assert_labels_readable(page: Any, count: int) -> None:
    """Every note has a marker; no two labels overlap; an unlabelled one has a tooltip."""
    markers = page.locator("#chart g.note")
    assert markers.count() == count
    boxes = page.eval_on_selector_all("#chart text.label", """nodes => nodes.map(n => {
        const b = n.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; })""")
    overlaps = [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]]
    assert overlaps == []
    unlabelled = [i for i in range(count) if markers.nth(i).locator("text").count() == 0]
    assert unlabelled, "the burst is too dense to label every note"
    assert f"{len(unlabelled)} notes without room for a label" in page.locator(
        "#chart-summary").inner_text()
    tooltip = page.locator("#chart-tooltip")
    for i in unlabelled:
        description = markers.nth(i).locator("title").text_content()
        # Focus (Tab) is precise: the tooltip tells this note.
        markers.nth(i).focus()
        assert tooltip.is_visible()
        assert tooltip.locator("strong").inner_text() == description
        # The pointer over markers closer than it can tell apart: the tooltip lists them all.
        markers.nth(i).locator("rect.hit").hover(force=True)
        assert tooltip.is_visible()
        assert description in tooltip.inner_text()


def test_dense_week_labels_never_overlap_and_colours_differ(page: Any, live_server: str) -> None:
    start = week(1)
    web01, web02 = tsuid_of(live_server, "web01"), tsuid_of(live_server, "web02")
    run = tag()
    expected = []
    # A burst: nine notes in 90 minutes on day 2 (global and both series), then one a day.
    for i in range(9):
        tsuid = ("", web01, web02)[i % 3]
        put_note(live_server, start + DAY_S + i * 600, f"Burst {i} {run}", tsuid)
        expected.append(f"Burst {i} {run}")
    for day in range(3, 7):
        put_note(live_server, start + day * DAY_S + 3600, f"Daily {day} {run}")
        expected.append(f"Daily {day} {run}")
    open_week(page, live_server, start)

    assert_labels_readable(page, len(expected))
    labels = page.locator("#chart text.label").all_text_contents()
    # Daily notes have room: all of them keep a label.
    assert sum(label.startswith("Daily") for label in labels) == 4

    # Distinct colours: each series its own, neither the global notes' colour.
    colour = page.evaluate("""sel => getComputedStyle(document.querySelector(sel)
        .querySelector('.rule')).stroke""", f"#chart g.note-global[data-note='|{start + DAY_S}']")
    series_colours = {page.locator(f"#chart g.note-series[data-note^='{t}']").first
                      .get_attribute("stroke") for t in (web01, web02)}
    assert len(series_colours) == 2 and None not in series_colours
    assert colour not in series_colours and colour.startswith("rgb")
    legend = page.locator("#chart-legend li").all_inner_texts()
    assert sum("host=web01" in item for item in legend) == 1
    assert sum("host=web02" in item for item in legend) == 1
    assert "Global note" in legend
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "annotations-dense-week.png"), full_page=True)


def test_dense_week_on_a_line_chart(page: Any, live_server: str) -> None:
    """The same density over lines: labels in three rows above the data, the rest tooltips."""
    start, run = week(7), tag()
    points = [{"metric": "e2e.dense", "timestamp": start + h * 3600, "value": h % 24,
               "tags": {"host": host}} for h in range(7 * 24) for host in ("a", "b")]
    response = requests.post(f"{live_server}/api/put", json=points, timeout=30)
    assert response.status_code == 204, response.text
    series = requests.get(f"{live_server}/api/query", timeout=30, params={
        "start": start, "end": start + 7 * DAY_S, "m": "none:e2e.dense", "show_tsuids": ""}).json()
    tsuids = [s["tsuids"][0] for s in series]
    for i in range(12):
        tsuid = ("", *tsuids)[i % 3]
        put_note(live_server, start + 2 * DAY_S + i * 900, f"Incident step {i} {run}", tsuid)
    open_week(page, live_server, start, extra="&m=e2e.dense")
    assert page.locator("#chart path.line").count() == 2
    assert_labels_readable(page, 12)
    assert len(page.locator("#chart text.label").all_text_contents()) >= 3
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "annotations-dense-lines.png"))


def test_create_form_is_reachable_without_scrolling(browser: Any, live_server: str,
                                                    console_errors: list[str]) -> None:
    context, page = open_context(browser, console_errors, viewport={"width": 1280, "height": 800})
    try:
        page.goto(f"{live_server}/annotations")
        page.get_by_role("status").filter(has_text="Showing").wait_for()
        for name in ("Description", "Start"):
            box = page.locator("#note-form").get_by_label(name).bounding_box()
            assert box is not None and box["y"] + box["height"] <= 800
        button = page.get_by_role("button", name="Create note").bounding_box()
        assert button is not None and button["y"] + button["height"] <= 800
        assert page.evaluate("window.scrollY") == 0
    finally:
        context.close()
    assert console_errors == []


def test_table_sorts_and_pages(page: Any, live_server: str) -> None:
    start, run = week(2), tag()
    names = ["delta", "alpha", "echo", "charlie", "bravo", "foxtrot", "golf", "hotel",
             "india", "juliet", "kilo", "lima"]
    for i, name in enumerate(names):
        put_note(live_server, start + i * 3600, f"{name} {run}")
    open_week(page, live_server, start)
    page.get_by_label("Per page").select_option("10")
    assert page.locator("#page-info").inner_text() == "1–10 of 12 · page 1 of 2"
    assert table_column(page, 5)[:2] == [f"delta {run}", f"alpha {run}"]  # by start
    page.get_by_role("button", name="Next").click()
    assert table_column(page, 5) == [f"kilo {run}", f"lima {run}"]
    assert page.get_by_role("button", name="Next").is_disabled()

    description = page.locator("#notes-table th[data-sort=description]")
    description.get_by_role("button").click()
    assert description.get_attribute("aria-sort") == "ascending"
    assert page.locator("#page-info").inner_text().startswith("1–10 of 12")
    assert table_column(page, 5)[:3] == [f"alpha {run}", f"bravo {run}", f"charlie {run}"]
    description.get_by_role("button").click()
    assert description.get_attribute("aria-sort") == "descending"
    assert table_column(page, 5)[0] == f"lima {run}"
    assert page.locator("#notes-table th[data-sort=start]").get_attribute("aria-sort") is None


def test_bulk_delete_and_undo(page: Any, live_server: str) -> None:
    start, run = week(3), tag()
    web01 = tsuid_of(live_server, "web01")
    put_note(live_server, start + 3600, f"keep {run}")
    put_note(live_server, start + 7200, f"drop global {run}", custom={"owner": "ops"},
             endTime=start + 9000, notes="two lines\nof notes")
    put_note(live_server, start + 7200, f"drop series {run}", web01)
    before = get_note(live_server, start + 7200).json()
    assert before["custom"] == {"owner": "ops"} and before["endTime"] == start + 9000
    open_week(page, live_server, start)
    assert page.get_by_role("button", name="Delete selected").is_disabled()
    for text in (f"drop global {run}", f"drop series {run}"):
        page.get_by_label(f"Select note {text}").check()
    page.get_by_role("button", name="Delete selected (2)").click()
    page.locator("#undo-text").filter(has_text="Deleted 2 notes.").wait_for()
    page.locator("#notes-body tr").filter(has_text="drop").first.wait_for(state="detached")
    assert table_column(page, 5) == [f"keep {run}"]
    assert get_note(live_server, start + 7200).status_code == 404
    assert get_note(live_server, start + 7200, web01).status_code == 404
    assert get_note(live_server, start + 3600).status_code == 200

    page.get_by_role("button", name="Undo").click()
    page.locator("#undo-text").filter(has_text="Restored 2 notes.").wait_for()
    page.locator("#notes-body tr", has_text=f"drop series {run}").wait_for()
    assert get_note(live_server, start + 7200).json() == before  # every field back
    assert get_note(live_server, start + 7200, web01).json()["description"] == (
        f"drop series {run}")
    assert table_column(page, 5) == [f"keep {run}", f"drop global {run}", f"drop series {run}"]

    # A single delete has the same undo, and no blocking dialog.
    page.get_by_role("button", name=f"Delete note keep {run}").click()
    page.locator("#undo-text").filter(has_text=f"Deleted note “keep {run}”.").wait_for()
    assert get_note(live_server, start + 3600).status_code == 404
    page.get_by_role("button", name="Undo").click()
    page.locator("#notes-body tr", has_text=f"keep {run}").wait_for()
    assert get_note(live_server, start + 3600).status_code == 200


def test_one_time_format_in_a_chosen_zone(browser: Any, live_server: str,
                                          console_errors: list[str]) -> None:
    start, run = week(4), tag()
    noon = start + 12 * 3600  # 12:00 UTC, 07:00 in New York (EST)
    put_note(live_server, noon, f"noon {run}")
    context, page = open_context(browser, console_errors, timezone_id="America/New_York",
                                 locale="en-US")
    try:
        page.goto(f"{live_server}/annotations?start={start * 1000}"
                  f"&end={(start + 7 * DAY_S) * 1000}&tz=local")
        page.get_by_role("status").filter(has_text="Showing").wait_for()
        label = "America/New_York (your browser, UTC−05:00)"
        assert page.locator("#range-format strong").inner_text() == label
        assert page.get_by_label("Time zone").input_value() == "local"
        row = page.locator("#notes-body tr", has_text=f"noon {run}")
        assert row.locator("td.time").first.text_content() == utc_text(noon - 5 * 3600)
        assert page.get_by_label("From").input_value() == utc_text(start - 5 * 3600)

        page.get_by_label("Time zone").select_option("utc")
        row.locator("td.time").first.filter(has_text=utc_text(noon)).wait_for()
        assert page.locator("#range-format strong").inner_text() == "UTC"
        assert page.get_by_label("From").input_value() == utc_text(start)
        assert parse_qs(urlsplit(page.url).query)["tz"] == ["utc"]

        # A time typed in the form is read in the chosen zone.
        form = page.locator("#note-form")
        form.get_by_label("Start").fill(utc_text(noon + 5400))
        form.get_by_label("Description").fill(f"typed in UTC {run}")
        page.get_by_role("button", name="Create note").click()
        page.locator("#notes-body tr", has_text=f"typed in UTC {run}").wait_for()
        assert get_note(live_server, noon + 5400).json()["description"] == f"typed in UTC {run}"
        page.get_by_label("Time zone").select_option("local")
        form.get_by_label("Start").fill("2024-01-10 09:00")  # EST: 14:00 UTC
        form.get_by_label("Description").fill(f"typed in New York {run}")
        page.get_by_role("button", name="Create note").click()
        page.locator("#notes-body tr", has_text=f"typed in New York {run}").wait_for()
        stored = get_note(live_server, 1_704_895_200)  # 2024-01-10 14:00:00 UTC
        assert stored.json()["description"] == f"typed in New York {run}"
        # The old 12-hour locale pickers are gone: one format everywhere.
        assert page.locator("input[type=datetime-local]").count() == 0
    finally:
        context.close()
    assert console_errors == []


def test_time_text_is_checked(page: Any, live_server: str) -> None:
    open_week(page, live_server, week(5))
    form = page.locator("#note-form")
    form.get_by_label("Start").fill("2024-02-30 10:00")
    form.get_by_label("End (optional)").fill("5 pm")
    form.get_by_label("Description").fill("never stored")
    page.get_by_role("button", name="Create note").click()
    assert page.locator("#form-errors li").all_inner_texts() == [
        "Start: “2024-02-30 10:00” is not a time as YYYY-MM-DD HH:MM:SS.",
        "End: “5 pm” is not a time as YYYY-MM-DD HH:MM:SS. Or leave it empty."]
    # A day-first date is not taken for an empty field: the message gives the text to type.
    form.get_by_label("Start").fill("27/11/2026 10:00")
    form.get_by_label("End (optional)").fill("")
    page.get_by_role("button", name="Create note").click()
    assert page.locator("#form-errors li").all_inner_texts() == [
        "Start: “27/11/2026 10:00” is not a time as YYYY-MM-DD HH:MM:SS, "
        "e.g. 2026-11-27 10:00."]
    form.get_by_label("Start").fill("")
    page.get_by_role("button", name="Create note").click()
    assert page.locator("#form-errors li").all_inner_texts() == [
        "Start: enter a time as YYYY-MM-DD HH:MM:SS."]
    page.get_by_label("From").fill("yesterday")
    page.get_by_role("button", name="Show").click()
    assert page.locator("#view-errors li").all_inner_texts() == [
        "From: “yesterday” is not a time as YYYY-MM-DD HH:MM:SS."]
    listing = requests.get(f"{live_server}/ui/api/notes", timeout=10, params={
        "start": week(5), "end": week(5) + 7 * DAY_S, "q": "never stored"}).json()
    assert listing["total"] == 0


def test_grafana_link_is_hidden_without_grafana(page: Any, live_server: str) -> None:
    open_week(page, live_server, week(6), extra="&m=sys.cpu.user")
    assert page.locator("#grafana-link").is_hidden()
    assert page.get_by_role("link", name="Grafana").count() == 0


def test_now_is_not_a_test_dependency() -> None:
    # The private weeks lie in the past whatever the clock says, so no test sees another's notes.
    assert week(0) < time.time() - 7 * DAY_S


LONG_ZONE = "America/Argentina/Buenos_Aires"
CAPTION_FITS = """() => {
  const caption = document.querySelector("#notes-caption").getBoundingClientRect();
  const scroller = document.querySelector(".table-scroll").getBoundingClientRect();
  return caption.left >= scroller.left - 0.5 && caption.right <= scroller.right + 0.5;
}"""


@pytest.mark.parametrize("width", WIDTHS)
def test_layout_holds_at_every_width(browser: Any, live_server: str, console_errors: list[str],
                                     width: int) -> None:
    start, run = week(8), tag()
    web01 = tsuid_of(live_server, "web01")
    put_note(live_server, start + 3600, f"Deploy with an end time {run}", endTime=start + 7200,
             notes="rolled out to every host\nin two waves", custom={"owner": "ops",
                                                                       "ticket": "OPS-1234"})
    put_note(live_server, start + 5400, f"CPU spike with a long description {run}", web01,
             endTime=start + 9000)
    # A long zone name: the select must not cut it, nor the text under it leave the panel.
    context, page = open_context(browser, console_errors, timezone_id=LONG_ZONE,
                                 viewport={"width": width, "height": 900})
    try:
        open_week(page, live_server, start)
        assert page.locator("#notes-caption").inner_text().startswith(
            "2 notes (global notes and those of every series) between ")
        # Every column, Delete included, inside the panel: the table fits at 1280 and 1920
        # (at 390 it scrolls inside its own box, the page does not).
        assert_layout_holds(page, tables_fit=width >= 1280)
        delete = page.get_by_role("button", name=f"Delete note Deploy with an end time {run}")
        if width >= 1280:
            box, panel = delete.bounding_box(), page.locator(
                "section[aria-labelledby=notes-heading]").bounding_box()
            assert box is not None and panel is not None
            assert box["x"] + box["width"] <= panel["x"] + panel["width"]
        # The browser's zone fits its select too (the full zone name is written below it).
        page.get_by_label("Time zone").select_option("local")
        page.locator("#range-format").filter(has_text="Buenos_Aires").wait_for()
        assert cut_selects(page) == [] and outside_their_panels(page) == []
        page.get_by_label("Time zone").select_option("utc")
        page.get_by_role("status").filter(has_text="Showing 2").wait_for()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"annotations-{width}.png"), full_page=True)

        # Global mode: the disabled Series select shows no series.
        series = page.locator("#note-series")
        assert series.is_disabled()
        assert series.input_value() == ""
        assert series.locator("option:checked").inner_text() == "None: a global note"
        page.locator("#note-form").get_by_label("One series").check()
        assert series.is_enabled() and series.input_value() == web01
        page.locator("#note-form").get_by_label("Everything (global note)").check()
        assert series.input_value() == "" and series.is_disabled()

        # Edit: the caption stays whole, the layout holds, the series note's series is chosen.
        page.get_by_role("button", name=f"Edit note CPU spike with a long description {run}"
                         ).click()
        assert page.locator("#form-heading").inner_text() == "Edit note"
        assert series.input_value() == web01 and series.is_enabled()
        assert page.evaluate(CAPTION_FITS)
        assert page.evaluate("document.querySelector('.table-scroll').scrollLeft") == 0 \
            or width < 1280
        assert outside_their_panels(page) == []
        page.get_by_role("button", name="Cancel editing").click()
        assert series.input_value() == "" and series.is_disabled()
    finally:
        context.close()
    assert console_errors == []
