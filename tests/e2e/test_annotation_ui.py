"""The annotation manager in a real browser against a real gunicorn server (demo data).

Each test uses its own descriptions and start times, so they share one server. Expectations
come from the issue: notes made in the page show up in its table and chart and in /api/query
(what Grafana reads); user text is shown as text, never run as HTML.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from tests.e2e.conftest import ARTIFACTS

WEB01_CPU = "sys.cpu.user{host=web01,dc=lga}"


def local_input(ts_s: int) -> str:
    """A datetime-local value; the page runs in UTC (see the ``page`` fixture)."""
    return datetime.fromtimestamp(ts_s, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def unique(text: str) -> str:
    return f"{text} {uuid.uuid4().hex[:6]}"


def open_page(page: Any, base_url: str, query: str = "range=24h") -> None:
    page.goto(f"{base_url}/annotations?{query}")
    page.get_by_role("status").filter(has_text="Showing").wait_for()


def note_row(page: Any, description: str) -> Any:
    return page.locator("#notes-body tr").filter(has_text=description)


def note_form(page: Any) -> Any:
    return page.locator("#note-form")


def fill_note(page: Any, description: str, start_s: int, *, end_s: int | None = None,
              notes: str = "", custom: str = "", series: str | None = None) -> None:
    form = note_form(page)
    if series is None:
        form.get_by_label("Everything (global note)").check()
    else:
        form.get_by_label("One series").check()
        form.get_by_label("Series", exact=True).select_option(label=series)
    form.get_by_label("Start").fill(local_input(start_s))
    form.get_by_label("End (optional)").fill(local_input(end_s) if end_s else "")
    form.get_by_label("Description").fill(description)
    form.get_by_label("Notes", exact=True).fill(notes)
    form.get_by_label("Custom fields").fill(custom)


def api_query(base_url: str, start_s: int) -> list[dict[str, Any]]:
    """Grafana's annotation request (legacy path): sum of the metric, global notes asked."""
    body = {"start": start_s * 1000, "globalAnnotations": True,
            "queries": [{"aggregator": "sum", "metric": "sys.cpu.user",
                         "filters": [{"type": "literal_or", "tagk": "host", "filter": "web01",
                                      "groupBy": False}]}]}
    response = requests.post(f"{base_url}/api/query", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return list(response.json())


def test_create_notes_see_them_in_list_chart_and_query(page: Any, live_server: str) -> None:
    now_s = int(time.time())
    open_page(page, live_server)
    # Choose the series with the suggest-driven inputs, as a user would.
    page.get_by_label("Metric").fill("sys.cpu.u")
    # A locator, not wait_for_function: that evaluates a string, which the page's CSP forbids.
    page.locator("#metric-suggestions option[value='sys.cpu.user']").wait_for(state="attached")
    page.get_by_label("Metric").fill("sys.cpu.user")
    page.get_by_label("Tags").fill("host=web01")
    page.get_by_role("button", name="Show").click()
    page.locator("#chart-legend li", has_text=WEB01_CPU).wait_for()

    global_text, series_text = unique("E2E deploy"), unique("E2E spike")
    global_start, series_start = now_s - 90 * 60, now_s - 10 * 3600
    fill_note(page, global_text, global_start, notes="from the browser test",
              custom="owner=qa\nticket=OPS-1")
    page.get_by_role("button", name="Create note").click()
    note_row(page, global_text).wait_for()
    fill_note(page, series_text, series_start, end_s=series_start + 1800,
              series=WEB01_CPU)
    page.get_by_role("button", name="Create note").click()
    note_row(page, series_text).wait_for()

    # The list says what each note applies to; the chart draws both kinds of marker.
    assert "Global" in note_row(page, global_text).inner_text()
    assert "owner=qa; ticket=OPS-1" in note_row(page, global_text).inner_text()
    assert WEB01_CPU in note_row(page, series_text).inner_text()
    global_marker = page.locator("#chart g.note-global", has_text=global_text)
    series_marker = page.locator("#chart g.note-series", has_text=series_text)
    assert global_marker.count() == 1 and series_marker.count() == 1
    assert series_marker.locator("rect.span").count() == 1  # the note has an end time
    assert page.locator("#chart path.line").count() == 1

    # /api/query gives Grafana both, start times in seconds.
    result = api_query(live_server, now_s - 86400)
    series_notes = {n["description"]: n for n in result[0]["annotations"]}
    global_notes = {n["description"]: n for n in result[0]["globalAnnotations"]}
    assert series_notes[series_text]["startTime"] == series_start
    assert series_notes[series_text]["endTime"] == series_start + 1800
    assert global_notes[global_text]["startTime"] == global_start
    assert global_notes[global_text]["custom"] == {"owner": "qa", "ticket": "OPS-1"}

    # Activating a marker on the chart (click, or Enter on the focused marker) opens the note.
    series_marker.locator("rect.hit").click()
    assert page.get_by_role("heading", name="Edit note").is_visible()
    assert note_form(page).get_by_label("Description").input_value() == series_text
    page.get_by_role("button", name="Cancel editing").click()
    global_marker.focus()
    page.keyboard.press("Enter")
    assert note_form(page).get_by_label("Description").input_value() == global_text
    assert page.evaluate("document.activeElement.id") == "form-heading"
    page.get_by_role("button", name="Cancel editing").click()

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "annotations-series-notes.png"), full_page=True)


def create_via_api(base_url: str, description: str, start_s: int) -> None:
    response = requests.put(f"{base_url}/api/annotation", timeout=10,
                            json={"startTime": start_s, "description": description,
                                  "notes": "made through the API"})
    assert response.status_code == 200, response.text


def get_via_api(base_url: str, start_s: int) -> requests.Response:
    return requests.get(f"{base_url}/api/annotation?start_time={start_s}", timeout=10)


def test_edit_and_delete(page: Any, live_server: str) -> None:
    now_s = int(time.time())
    first, second = now_s - 4 * 3600, now_s - 4 * 3600 + 600
    edit_text, delete_text = unique("E2E to edit"), unique("E2E to delete")
    create_via_api(live_server, edit_text, first)
    create_via_api(live_server, delete_text, second)
    open_page(page, live_server)

    note_row(page, edit_text).get_by_role("button", name=f"Edit note {edit_text}").click()
    form = note_form(page)
    assert form.get_by_label("Notes", exact=True).input_value() == "made through the API"
    form.get_by_label("Description").fill(f"{edit_text} (edited)")
    form.get_by_label("Notes", exact=True).fill("")
    page.get_by_role("button", name="Save changes").click()
    note_row(page, f"{edit_text} (edited)").wait_for()
    stored = get_via_api(live_server, first).json()
    assert stored["description"] == f"{edit_text} (edited)" and stored["notes"] == ""

    # Moving a note in time writes it at the new start and removes the old one.
    note_row(page, edit_text).get_by_role("button", name="Edit note").click()
    form.get_by_label("Start").fill(local_input(first - 60))
    page.get_by_role("button", name="Save changes").click()
    moved = local_input(first - 60).replace("T", " ")
    note_row(page, edit_text).filter(has_text=moved).wait_for()
    assert note_row(page, edit_text).count() == 1
    assert get_via_api(live_server, first).status_code == 404
    assert get_via_api(live_server, first - 60).json()["description"].startswith(edit_text)

    note_row(page, delete_text).get_by_role("button", name=f"Delete note {delete_text}").click()
    note_row(page, delete_text).wait_for(state="detached")
    assert get_via_api(live_server, second).status_code == 404


def test_invalid_input_is_refused(page: Any, live_server: str) -> None:
    # A range in 2001 has no data and no notes: the form has no series to offer.
    open_page(page, live_server, "start=978307200000&end=978393600000")
    before = requests.get(f"{live_server}/api/annotation/list?start=30d-ago", timeout=10).json()
    form = note_form(page)
    form.get_by_label("One series").check()
    form.get_by_label("Start").fill(local_input(int(time.time()) - 3600))
    form.get_by_label("End (optional)").fill(local_input(int(time.time()) - 7200))
    form.get_by_label("Custom fields").fill("owner=ops\nnot a pair\nowner=dev")
    page.get_by_role("button", name="Create note").click()

    summary = page.locator("#form-errors")
    summary.wait_for()
    messages = summary.locator("li").all_inner_texts()
    assert messages == [
        "Choose a series, or make the note global.",
        "The end must not be before the start.",
        "Enter a description.",
        "Custom fields: line 2 is not key=value.",
        "Custom fields: the key “owner” appears twice.",
    ]
    assert page.evaluate("document.activeElement.id") == "form-errors"
    assert form.get_by_label("Description").get_attribute("aria-invalid") == "true"
    # The range picker refuses an empty range too.
    page.get_by_label("Range").select_option("custom")
    page.get_by_label("To", exact=True).fill(page.get_by_label("From", exact=True).input_value())
    page.get_by_role("button", name="Show").click()
    assert page.locator("#view-errors li").all_inner_texts() == [
        "The end must be after the start."]
    after = requests.get(f"{live_server}/api/annotation/list?start=30d-ago", timeout=10).json()
    assert after["total"] == before["total"]


def test_markup_is_shown_as_text(page: Any, live_server: str) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    markup = f"<img src=x onerror=alert(1)> {uuid.uuid4().hex[:6]}"
    response = requests.put(f"{live_server}/api/annotation", timeout=10, json={
        "startTime": int(time.time()) - 5 * 3600, "description": f"API {markup}",
        "notes": "<b>bold?</b>", "custom": {"<i>k</i>": "<script>alert(2)</script>"}})
    assert response.status_code == 200, response.text
    open_page(page, live_server)
    fill_note(page, markup, int(time.time()) - 5 * 3600 + 60)
    page.get_by_role("button", name="Create note").click()
    row = note_row(page, markup).filter(has_not_text="API")
    row.wait_for()

    assert row.locator("td").nth(4).inner_text() == markup  # after the select box
    api_row = note_row(page, f"API {markup}")
    assert "<b>bold?</b>" in api_row.inner_text()
    assert "<i>k</i>=<script>alert(2)</script>" in api_row.inner_text()
    for selector in ("#notes-body img", "#notes-body b", "#notes-body script", "#chart img"):
        assert page.locator(selector).count() == 0
    assert page.locator("#chart g.note", has_text=markup).count() == 2
    page.wait_for_timeout(300)  # an injected onerror handler would have fired by now
    assert dialogs == []


@pytest.mark.parametrize("path", ["/", "/annotations"])
def test_pages_link_each_other(page: Any, live_server: str, path: str) -> None:
    page.goto(f"{live_server}{path}")
    target = "Annotations" if path == "/" else "pytsd"
    page.get_by_role("link", name=target).first.click()
    page.wait_for_load_state()
    assert urlsplit(page.url).path == ("/annotations" if path == "/" else "/")
