"""Replay the provisioned dashboard against pytsd exactly as Grafana would send it.

Every panel query, template-variable query and annotation query of
grafana/dashboards/pytsd-demo.json is rebuilt by tests/functional/grafana_requests.py (a model of
Grafana's browser path "L" and Go backend path "B", shared/notes/grafana-opentsdb-contract.md
§1-3) with the provisioned datasource settings, sent to a server holding the demo data set, and
the response is read the way Grafana reads it (§2).

Expected tag values come from the demo data set's description (six hosts: web01, web02, db01 in
lga; web03, web04, db02 in sjc; http.* on web hosts only, status 200 and 500), never from pytsd.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from tests.functional import grafana_requests as gr

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD: dict[str, Any] = json.loads(
    (ROOT / "grafana/dashboards/pytsd-demo.json").read_text(encoding="utf-8"))
DATASOURCE: dict[str, Any] = yaml.safe_load(
    (ROOT / "grafana/provisioning/datasources/opentsdb.yaml").read_text(encoding="utf-8")
)["datasources"][0]
SETTINGS = gr.Settings(tsdb_version=DATASOURCE["jsonData"]["tsdbVersion"],
                       tsdb_resolution=DATASOURCE["jsonData"]["tsdbResolution"],
                       lookup_limit=DATASOURCE["jsonData"]["lookupLimit"])
PATHS = ("L", "B")

RANGE_S = 24 * 3600  # the dashboard's default range, now-24h .. now (asserted below)
# Grafana's auto interval for 24 h on a ~1,400 px wide panel: 86400 s / 1400 = 61.7 s, which
# rangeutil.roundInterval rounds to 1m.
AUTO_INTERVAL, AUTO_INTERVAL_MS = "1m", 60_000

DCS = {"lga", "sjc"}
ALL_HOSTS = {"web01", "web02", "web03", "web04", "db01", "db02"}
WEB_HOSTS = {"web01", "web02", "web03", "web04"}
LGA_HOSTS = {"web01", "web02", "db01"}
DEMO_METRICS = {"sys.cpu.user", "sys.cpu.system", "sys.mem.used_bytes", "net.if.bytes_in",
                "net.if.bytes_out", "http.requests", "http.latency_ms"}
GLOBAL_NOTES = {"Deploy v1.2.3", "Maintenance window"}
# (panel title, refId) -> (group-by tag key, its values with every host selected); None means
# the query aggregates everything into one series.
EXPECTED_GROUPS: dict[tuple[str, str], tuple[str, set[str]] | None] = {
    ("CPU user by host", "A"): ("host", ALL_HOSTS),
    ("CPU user + system by data centre", "A"): ("dc", DCS),
    ("CPU user + system by data centre", "B"): ("dc", DCS),
    ("Memory used by host", "A"): ("host", ALL_HOSTS),
    ("Network traffic by data centre (rate)", "A"): ("dc", DCS),
    ("Network traffic by data centre (rate)", "B"): ("dc", DCS),
    ("HTTP requests per second by status", "A"): ("status", {"200", "500"}),
    ("HTTP latency", "A"): None,
    ("HTTP latency", "B"): ("host", WEB_HOSTS),
    ("CPU user, all selected hosts", "A"): None,
}
PANELS = [p for p in DASHBOARD["panels"] if p.get("targets")]
ANNOTATIONS = [a for a in DASHBOARD["annotations"]["list"] if not a.get("builtIn")]


def send(client: FlaskClient, request: gr.Request) -> TestResponse:
    if request.method == "GET":
        return client.get(request.url)
    return client.post(request.url, data=request.body, content_type="application/json")


def ok_json(response: TestResponse) -> Any:
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return response.get_json()


def resolve_variables(client: FlaskClient, path: str,
                      selected: dict[str, list[str]] | None = None) -> dict[str, list[str]]:
    """Refresh the variables in dashboard order; unselected ones take "All" (every value)."""
    variables: dict[str, list[str]] = {}
    for var in DASHBOARD["templating"]["list"]:
        request = gr.find_query_requests(var["query"], variables, SETTINGS)[path]
        values = gr.find_query_values(gr.variable_tag_key(var["query"]),
                                      ok_json(send(client, request)), path)
        variables[var["name"]] = (selected or {}).get(var["name"], values)
    return variables


def panel_requests(panel: dict[str, Any], variables: dict[str, list[str]],
                   path: str) -> list[gr.Request]:
    now_s = int(time.time())
    if path == "L":
        request = gr.legacy_panel_request(panel["targets"], variables, AUTO_INTERVAL,
                                          (now_s - RANGE_S) * 1000, SETTINGS)
        assert request is not None
        return [request]
    return gr.backend_panel_requests(panel["targets"], variables, AUTO_INTERVAL_MS,
                                     now_s - RANGE_S, now_s, SETTINGS)


def check_series(series: dict[str, Any], sub_query: dict[str, Any]) -> None:
    """What both paths need of one series object (contract §2, §5 Q2/Q7/Q14)."""
    assert series["metric"] == sub_query["metric"]
    assert isinstance(series["tags"], dict)
    assert isinstance(series.get("aggregateTags"), list)
    dps = series["dps"]
    assert isinstance(dps, dict) and dps, f"no points for {sub_query}"
    now_s = int(time.time())
    for key, value in dps.items():
        assert re.fullmatch(r"\d{10}", key), f"dps key {key!r} is not epoch seconds"
        assert now_s - RANGE_S - 3600 <= int(key) <= now_s + 60
        nullable = sub_query.get("downsample", "").endswith("-null")
        assert (value is None and nullable) or (
            isinstance(value, int | float) and not isinstance(value, bool)), value
        if sub_query.get("rate") and value is not None:
            assert value >= 0, "rate of a monotonic counter went negative"


def check_groups(title: str, ref_id: str, series_list: list[dict[str, Any]]) -> None:
    expected = EXPECTED_GROUPS[(title, ref_id)]
    if expected is None:
        assert len(series_list) == 1
        return
    tagk, values = expected
    assert sorted(s["tags"].get(tagk) for s in series_list) == sorted(values)


def run_panel(client: FlaskClient, panel: dict[str, Any], variables: dict[str, list[str]],
              path: str) -> dict[str, list[dict[str, Any]]]:
    """Send a panel refresh; return the series per refId, attributed as Grafana does."""
    visible = [t for t in panel["targets"] if t.get("metric") and not t.get("hide")]
    by_ref: dict[str, list[dict[str, Any]]] = {}
    for number, request in enumerate(panel_requests(panel, variables, path)):
        sub_queries = json.loads(request.body or "")["queries"]
        result = ok_json(send(client, request))
        assert isinstance(result, list) and result, f"{panel['title']}: no series"
        for series in result:
            # v3 on path L: series.query.index is required (Q8); path B: one query per POST.
            index = series["query"]["index"] if path == "L" else 0
            check_series(series, sub_queries[index])
            ref_id = visible[index if path == "L" else number]["refId"]
            by_ref.setdefault(ref_id, []).append(series)
    return by_ref


def test_dashboard_range_is_the_demo_day() -> None:
    assert DASHBOARD["time"] == {"from": "now-24h", "to": "now"}


@pytest.mark.parametrize("path", PATHS)
def test_variable_queries_return_the_demo_tag_values(demo_client: FlaskClient, path: str) -> None:
    variables = resolve_variables(demo_client, path)
    assert set(variables["dc"]) == DCS and len(variables["dc"]) == 2
    assert set(variables["host"]) == ALL_HOSTS and len(variables["host"]) == 6


@pytest.mark.parametrize("path", PATHS)
def test_host_variable_follows_the_selected_dc(demo_client: FlaskClient, path: str) -> None:
    host_query = DASHBOARD["templating"]["list"][1]["query"]
    request = gr.find_query_requests(host_query, {"dc": ["lga"]}, SETTINGS)[path]
    values = gr.find_query_values("host", ok_json(send(demo_client, request)), path)
    assert sorted(values) == sorted(LGA_HOSTS)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("panel", PANELS, ids=[p["title"] for p in PANELS])
def test_panel_returns_data(demo_client: FlaskClient, panel: dict[str, Any], path: str) -> None:
    variables = resolve_variables(demo_client, path)
    by_ref = run_panel(demo_client, panel, variables, path)
    assert sorted(by_ref) == sorted(t["refId"] for t in panel["targets"])
    for ref_id, series_list in by_ref.items():
        check_groups(panel["title"], ref_id, series_list)


@pytest.mark.parametrize("path", PATHS)
def test_panel_follows_a_single_selection(demo_client: FlaskClient, path: str) -> None:
    panel = next(p for p in PANELS if p["title"] == "CPU user by host")
    variables = resolve_variables(demo_client, path, {"dc": ["sjc"], "host": ["web03"]})
    by_ref = run_panel(demo_client, panel, variables, path)
    assert [s["tags"]["host"] for s in by_ref["A"]] == ["web03"]


def test_backend_v4_gets_arrays(demo_client: FlaskClient) -> None:
    # A user who picks "==2.4" makes path B add ?arrays=true and parse [[ts, value], ...] (§3).
    panel = next(p for p in PANELS if p["title"] == "Memory used by host")
    now_s = int(time.time())
    v4 = gr.Settings(4, 1, 1000)
    [request] = gr.backend_panel_requests(panel["targets"], {"host": sorted(ALL_HOSTS)},
                                          AUTO_INTERVAL_MS, now_s - RANGE_S, now_s, v4)
    result = ok_json(send(demo_client, request))
    assert len(result) == 6
    for series in result:
        stamps = [point[0] for point in series["dps"]]
        assert stamps and stamps == sorted(stamps) and all(len(p) == 2 for p in series["dps"])
        assert all(len(str(ts)) == 10 for ts in stamps)


def annotation_events(client: FlaskClient, annotation: dict[str, Any], path: str) -> list[Any]:
    """The events Grafana would draw for one annotation query (contract §1.7)."""
    metric, is_global = annotation["target"]["target"], annotation["target"]["isGlobal"]
    key = "globalAnnotations" if is_global else "annotations"
    now_s = int(time.time())
    if path == "L":
        request = gr.legacy_annotation_request(metric, (now_s - RANGE_S) * 1000, SETTINGS)
        result = ok_json(send(client, request))
        return list(result[0].get(key, [])) if result else []  # only response[0] is read
    request = gr.backend_annotation_request(metric, now_s - RANGE_S, now_s, SETTINGS)
    return [note for series in ok_json(send(client, request)) for note in series.get(key, [])]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("annotation", ANNOTATIONS, ids=[a["name"] for a in ANNOTATIONS])
def test_annotation_query_returns_notes(demo_client: FlaskClient, annotation: dict[str, Any],
                                        path: str) -> None:
    # Path B never asks for globalAnnotations (§1.7): the global query shows notes only if the
    # server attaches them unasked, which pytsd must do for the dashboard to work on 12.4+.
    events = annotation_events(demo_client, annotation, path)
    assert events, f"{annotation['name']}: Grafana would draw nothing on path {path}"
    now_s = int(time.time())
    for note in events:
        assert isinstance(note["description"], str) and note["description"]
        assert now_s - RANGE_S - 60 <= int(note["startTime"]) <= now_s  # seconds (Q9)
    descriptions = {note["description"] for note in events}
    if annotation["target"]["isGlobal"]:
        assert GLOBAL_NOTES <= descriptions
    else:
        assert not descriptions & GLOBAL_NOTES, "global notes leaked into series annotations"


@pytest.mark.parametrize("path", PATHS)
def test_health_check_passes(demo_client: FlaskClient, path: str) -> None:
    # L: any 2xx of suggest with max; B: exactly 200 for ?q=cpu&type=metrics without max (§1.1).
    if path == "L":
        query = gr.browser_query_string([("type", "metrics"), ("q", "cpu"),
                                         ("max", SETTINGS.lookup_limit)])
    else:
        query = gr.go_query_string({"q": "cpu", "type": "metrics"})
    response = demo_client.get("/api/suggest?" + query)
    assert response.status_code == 200
    assert isinstance(response.get_json(), list)


def test_query_editor_calls_offer_what_the_dashboard_uses(demo_client: FlaskClient) -> None:
    """Opening any panel's editor: aggregators, filter types, metric list (§1.4-1.6)."""
    targets = [t for p in PANELS for t in p["targets"]]
    aggregators = ok_json(demo_client.get("/api/aggregators"))
    assert {t["aggregator"] for t in targets} | {t["downsampleAggregator"] for t in targets} \
        <= set(aggregators)
    filter_types = ok_json(demo_client.get("/api/config/filters"))
    assert isinstance(filter_types, dict)
    assert {f["type"] for t in targets for f in t.get("filters", [])} <= set(filter_types)
    for request in gr.find_query_requests("metrics()", {}, SETTINGS).values():
        assert DEMO_METRICS <= set(ok_json(send(demo_client, request)))
    for request in gr.find_query_requests("suggest_tagv(web)", {}, SETTINGS).values():
        assert WEB_HOSTS <= set(ok_json(send(demo_client, request)))
