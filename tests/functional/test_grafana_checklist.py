"""Grafana's checklist for ``/api/query`` (shared/notes/grafana-opentsdb-contract.md §7, items
7-23), on every backend.

Requests are built by tests/functional/grafana_requests.py, a model of Grafana's browser path
"L" and Go backend path "B" (contract §1-3), from panel targets as Grafana's editor stores them.
Responses are read the way each path reads them (contract §2). Data: spec §9's data set L
(sys.cpu.user and sys.cpu.system; web01 = k and web02 = 301-k at 1356998400 + 30k, k = 1..300),
so every expected value is written by hand from that definition.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from app.tsdb import TSDB
from app.tsdb.writer import DataPoint, PointWriter
from tests.cases.datasets import long_seconds
from tests.functional import grafana_requests as gr

T0 = 1356998400
START_S, END_S = T0, T0 + 3 * 3600
V3 = gr.Settings(tsdb_version=3, tsdb_resolution=1, lookup_limit=1000)
V4 = gr.Settings(tsdb_version=4, tsdb_resolution=1, lookup_limit=1000)
PATHS = ("L", "B")
WEB01 = {T0 + 30 * k: k for k in range(1, 301)}
WEB02 = {T0 + 30 * k: 301 - k for k in range(1, 301)}


@pytest.fixture
def grafana(tsdb: TSDB, client: FlaskClient) -> FlaskClient:
    """L, plus cpu.usage{host=web01} = 1 and cpu.usage{host=web01,dc=lga} = 10 at T0+30."""
    points = [DataPoint(*p) for p in long_seconds()]
    points += [DataPoint("cpu.usage", T0 + 30, 1, {"host": "web01"}),
               DataPoint("cpu.usage", T0 + 30, 10, {"host": "web01", "dc": "lga"})]
    assert not any(PointWriter(tsdb).write(points))
    return client


def target(ref_id: str = "A", **fields: Any) -> dict[str, Any]:
    """A panel target as Grafana's editor saves it (its defaults, contract §1.4), no downsample."""
    return {"refId": ref_id, "datasource": {"type": "opentsdb", "uid": "pytsd"},
            "metric": "sys.cpu.user", "aggregator": "sum", "downsampleAggregator": "avg",
            "downsampleFillPolicy": "none", "disableDownsampling": True, **fields}


def requests(path: str, targets: list[dict[str, Any]], settings: gr.Settings = V3,
             variables: dict[str, list[str]] | None = None, interval_ms: int = 60_000,
             with_end: bool = True) -> list[gr.Request]:
    """What one panel refresh sends: one POST (L, ms) or one POST per target (B, seconds)."""
    variables = variables or {}
    if path == "B":
        return gr.backend_panel_requests(targets, variables, interval_ms, START_S, END_S,
                                         settings)
    interval = gr.format_downsample_interval(interval_ms)
    queries = [q for t in targets
               if (q := gr.legacy_sub_query(t, variables, interval, settings)) is not None]
    end_ms = END_S * 1000 if with_end else None
    return [gr.legacy_query(queries, START_S * 1000, end_ms, settings)]


def send(client: FlaskClient, request: gr.Request) -> TestResponse:
    return client.post(request.url, data=request.body, content_type="application/json")


def strict_json(response: TestResponse) -> Any:
    """Parse as Go and JS do: a bare NaN or Infinity token is a syntax error (contract §2)."""
    def refuse(token: str) -> Any:
        raise AssertionError(f"bare {token} in the response")
    return json.loads(response.get_data(as_text=True), parse_constant=refuse)


def ok(response: TestResponse) -> Any:
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return strict_json(response)


def run(client: FlaskClient, path: str, targets: list[dict[str, Any]],
        **options: Any) -> dict[str, list[dict[str, Any]]]:
    """The series per refId, attributed as Grafana does: by ``query.index`` on L (v3), by
    request on B (contract §2.1.3, §3)."""
    visible = [t for t in targets if t.get("metric") and not t.get("hide")]
    by_ref: dict[str, list[dict[str, Any]]] = {t["refId"]: [] for t in visible}
    for number, request in enumerate(requests(path, targets, **options)):
        for series in ok(send(client, request)):
            index = series["query"]["index"] if path == "L" else number
            by_ref[visible[index]["refId"]].append(series)
    return by_ref


def points(series: dict[str, Any]) -> dict[int, Any]:
    """``dps`` as Grafana reads it: seconds keys (object) or [ts, value] pairs (arrays)."""
    dps = series["dps"]
    if isinstance(dps, list):
        return {int(ts): value for ts, value in dps}
    return {int(key): value for key, value in dps.items()}


def by_host(series_list: list[dict[str, Any]]) -> dict[str | None, dict[int, Any]]:
    return {s["tags"].get("host"): points(s) for s in series_list}


# ------------------------------------------------------------------------------ items 7-9
@pytest.mark.parametrize("path", PATHS)
def test_07_start_and_end_in_ms_or_seconds(grafana: FlaskClient, path: str) -> None:
    # L sends 13-digit ms, B 10-digit seconds (Q1).
    [request] = requests(path, [target(tags={"host": "web01"})])
    assert re.search(r'"start":\d{13},' if path == "L" else r'"start":\d{10},', request.body or "")
    assert by_host(ok(send(grafana, request))) == {"web01": WEB01}


def test_07_missing_end_means_now(grafana: FlaskClient) -> None:
    [request] = requests("L", [target(tags={"host": "web01"})], with_end=False)
    assert '"end"' not in (request.body or "")
    assert by_host(ok(send(grafana, request))) == {"web01": WEB01}


@pytest.mark.parametrize("path", PATHS)
def test_08_unknown_keys_are_ignored(grafana: FlaskClient, path: str) -> None:
    # Path L clones the whole target (PR #71232): every editor field arrives.
    panel_target = target(tags={"host": "web01"}, alias="$tag_host", hide=False,
                          key="Q-1a2b", counterMax="", counterResetValue="", isCounter=False,
                          shouldComputeRate=False, downsampleInterval="", explicitTags=False,
                          currentTagKey="", currentTagValue="", currentFilterType="iliteral_or")
    [request] = requests(path, [panel_target])
    body = json.loads(request.body or "")
    body.update({"panelId": 4, "range": {"from": "now-6h"}, "interval": "1m"})
    response = grafana.post(request.url, data=json.dumps(body))
    assert by_host(ok(response)) == {"web01": WEB01}


WEB01_FILTER = '"filters":[{"type":"literal_or","tagk":"host","filter":"web01","groupBy":%s}]'
TAGS_AND_FILTERS = [
    ('"tags":{}', WEB01_FILTER % "true"),
    ('"tags":{"host":"web01"}', '"filters":[]'),
    ('"tags":[]', WEB01_FILTER % "true"),
    ('"tags":{"host":"*"}', WEB01_FILTER % "false"),
]


@pytest.mark.parametrize(("tags", "filters"), TAGS_AND_FILTERS)
def test_09_tags_and_filters_in_either_order(grafana: FlaskClient, tags: str,
                                             filters: str) -> None:
    # Q5: empty ones count as absent, both apply, and the JSON key order does not matter.
    for first, second in ((tags, filters), (filters, tags)):
        body = (f'{{"start":{START_S * 1000},"queries":[{{"refId":"A","metric":"sys.cpu.user",'
                f'"aggregator":"sum",{first},{second}}}],"msResolution":false,'
                f'"globalAnnotations":true,"showQuery":true,"end":{END_S * 1000}}}')
        result = ok(grafana.post("/api/query", data=body))
        assert by_host(result) == {"web01": WEB01}, body


# ------------------------------------------------------------------------------ items 10-13
def group_by(kind: str) -> list[dict[str, Any]]:
    return [{"type": kind, "tagk": "host", "filter": "$host", "groupBy": True}]


# Q6: a multi-value variable arrives pipe-joined, `web01|WEB02` (iliteral_or ignores case).
MULTI_VALUE = [
    (target(filters=group_by("literal_or")), ["web01", "web02"]),
    (target(filters=group_by("iliteral_or")), ["web01", "WEB02"]),
    (target(tags={"host": "$host"}), ["web01", "web02"]),
    (target(tags={"host": "*"}), []),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("panel_target", "hosts"), MULTI_VALUE)
def test_10_multi_value_variables_and_wildcards(grafana: FlaskClient, path: str,
                                                panel_target: dict[str, Any],
                                                hosts: list[str]) -> None:
    [series_list] = run(grafana, path, [panel_target], variables={"host": hosts}).values()
    assert by_host(series_list) == {"web01": WEB01, "web02": WEB02}


@pytest.mark.parametrize("path", PATHS)
def test_10_pipe_without_group_by_aggregates(grafana: FlaskClient, path: str) -> None:
    flt = {"type": "literal_or", "tagk": "host", "filter": "$host", "groupBy": False}
    [series_list] = run(grafana, path, [target(filters=[flt])],
                        variables={"host": ["web01", "web02"]}).values()
    assert [(s["aggregateTags"], points(s)) for s in series_list] == \
        [(["host"], {ts: 301 for ts in WEB01})]


def downsampled(interval: str, function: str, fill: str) -> dict[str, Any]:
    return target(tags={"host": "web01"}, disableDownsampling=False,
                  downsampleInterval=interval, downsampleAggregator=function,
                  downsampleFillPolicy=fill)


# (interval, function, fill) -> the first buckets and one empty bucket after the data
# (which ends at T0+9000), by hand from WEB01.
DOWNSAMPLES = {
    ("1m", "avg", "none"): ({T0: 1.0, T0 + 60: 2.5, T0 + 120: 4.5}, None),
    ("0.5s", "avg", "none"): ({T0 + 30: 1.0, T0 + 60: 2.0}, None),  # sent as 500ms
    ("2d", "min", "none"): ({T0: 1.0}, None),  # T0 is a multiple of 2 days
    ("5m", "sum", "null"): ({T0: 45.0, T0 + 300: 145.0}, (T0 + 9300, None)),
    ("1m", "avg", "nan"): ({T0: 1.0, T0 + 60: 2.5}, (T0 + 9060, "NaN")),
    ("1m", "avg", "zero"): ({T0: 1.0, T0 + 60: 2.5}, (T0 + 9060, 0.0)),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("spec", list(DOWNSAMPLES), ids=["-".join(s) for s in DOWNSAMPLES])
def test_11_downsample_strings(grafana: FlaskClient, path: str,
                               spec: tuple[str, str, str]) -> None:
    first, empty = DOWNSAMPLES[spec]
    [request] = requests(path, [downsampled(*spec)])
    expected_text = ("500ms" if spec[0] == "0.5s" else spec[0]) + "-" + spec[1]
    assert f'"downsample":"{expected_text}' in (request.body or "")
    [series] = ok(send(grafana, request))
    got = points(series)
    assert {ts: got.get(ts) for ts in first} == first
    if empty is not None:  # "NaN" is OpenTSDB's quoted string (docs/query-differences.md)
        assert got[empty[0]] == empty[1] and type(got[empty[0]]) is type(empty[1])


@pytest.mark.parametrize("path", PATHS)
def test_11_malformed_downsample_is_a_400(grafana: FlaskClient, path: str) -> None:
    # L: a target without downsampleAggregator sends `1m-undefined`; B: an empty one `1m-`.
    panel_target = target(disableDownsampling=False, downsampleInterval="1m")
    del panel_target["downsampleAggregator"]
    if path == "B":
        panel_target["downsampleAggregator"] = ""
    [request] = requests(path, [panel_target])
    assert ('"1m-undefined"' if path == "L" else '"1m-"') in (request.body or "")
    response = send(grafana, request)
    assert response.status_code == 400
    error = strict_json(response)["error"]
    assert error["code"] == 400 and ("1m-" in error["message"] or "undefined" in error["message"])


RATE_TARGETS = [
    # web02 falls by 1 every 30 s: a counter with max 1000 wraps to (1000 - 1)/30 each step.
    ("L", {"isCounter": True, "counterMax": "1000"}, 999 / 30),
    ("B", {"isCounter": True, "counterMax": "1000"}, 999 / 30),
    # ...a reset value below 33.3 turns every wrapped rate into 0.0.
    ("B", {"isCounter": True, "counterMax": "1000", "counterResetValue": "10"}, 0.0),
    ("L", {"isCounter": True, "counterMax": "1000", "counterResetValue": "10"}, 0.0),
    # Grafana's 2**64 arrives as 1.8446744073709552e+19: clamped to 2**63-1 (query-differences),
    # so the wrap is (2**63-1) - 1 in long arithmetic.
    ("B", {"isCounter": True, "counterMax": "18446744073709551616"}, (2**63 - 2) / 30),
    # Not a counter: the plain rate.
    ("L", {"isCounter": False}, -1 / 30),
    ("B", {"isCounter": False}, -1 / 30),
]


@pytest.mark.parametrize(("path", "fields", "rate"), RATE_TARGETS)
def test_12_rate_options(grafana: FlaskClient, path: str, fields: dict[str, Any],
                         rate: float) -> None:
    panel_target = target(tags={"host": "web02"}, shouldComputeRate=True, **fields)
    [series] = run(grafana, path, [panel_target])["A"]
    assert points(series) == {T0 + 30 * k: pytest.approx(rate, rel=1e-12) for k in range(2, 301)}


@pytest.mark.parametrize(("counter_max", "rate"), [
    ("1000", 999 / 30), ("1e3", 999 / 30), ("1000.0", 999 / 30), ("1.0E3", 999 / 30),
    ("1.8446744073709552e+19", (2**63 - 2) / 30), ("null", (2**63 - 2) / 30)])
def test_12_numeric_forms_of_counter_max(grafana: FlaskClient, counter_max: str,
                                         rate: float) -> None:
    # Ints, floats, exponents; 2**64 is clamped and null is the default, Long.MAX_VALUE.
    body = (f'{{"start":{START_S},"end":{END_S},"queries":[{{"aggregator":"sum",'
            f'"metric":"sys.cpu.user","rate":true,"rateOptions":{{"counter":true,'
            f'"counterMax":{counter_max}}},"tags":{{"host":"web02"}}}}]}}')
    [series] = ok(grafana.post("/api/query", data=body))
    assert list(points(series).values()) == [pytest.approx(rate, rel=1e-12)] * 299


def test_12_null_counter_max_with_drop_resets(grafana: FlaskClient) -> None:
    # L with a non-numeric counterMax sends null and dropResets = !NaN = true: every fall of
    # web02 is a reset and is dropped, web01 never falls.
    panel_target = target(filters=[{"type": "wildcard", "tagk": "host", "filter": "*",
                                    "groupBy": True}],
                          shouldComputeRate=True, isCounter=True, counterMax="abc")
    [request] = requests("L", [panel_target])
    body = request.body or ""
    assert '"counterMax":null' in body and '"dropResets":true' in body
    result = by_host(ok(send(grafana, request)))
    assert result == {"web01": {ts: pytest.approx(1 / 30) for ts in list(WEB01)[1:]},
                      "web02": {}}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("explicit", "value"), [(True, 1), (False, 11)])
def test_13_explicit_tags(grafana: FlaskClient, path: str, explicit: bool, value: int) -> None:
    # cpu.usage{host=web01} = 1 and cpu.usage{host=web01,dc=lga} = 10.
    flt = {"type": "literal_or", "tagk": "host", "filter": "web01", "groupBy": False}
    panel_target = target(metric="cpu.usage", filters=[flt], explicitTags=explicit)
    [request] = requests(path, [panel_target])
    assert ('"explicitTags":true' in (request.body or "")) is explicit
    assert [points(s) for s in ok(send(grafana, request))] == [{T0 + 30: value}]


# ------------------------------------------------------------------------------ items 14-18
SHAPES = [target(), target(tags={"host": "*"}), target(aggregator="none"),
          target(metric="sys.cpu.system", filters=[{"type": "regexp", "tagk": "host",
                                                    "filter": "web0[12]", "groupBy": True}])]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("panel_target", SHAPES)
def test_14_every_series_has_metric_tags_aggregate_tags_and_dps(
        grafana: FlaskClient, path: str, panel_target: dict[str, Any]) -> None:
    [series_list] = run(grafana, path, [panel_target]).values()
    assert series_list
    for series in series_list:
        assert series["metric"] == panel_target["metric"]  # Q7: the requested string
        assert isinstance(series["tags"], dict) and isinstance(series["aggregateTags"], list)
        assert series["dps"]
        # Tag-key autocomplete reads tags and aggregateTags (contract §1.4).
        assert "host" in set(series["tags"]) | set(series["aggregateTags"])


@pytest.mark.parametrize("resolution", [1, 2])
def test_15_dps_keys_are_ascending_seconds_or_ms(grafana: FlaskClient, resolution: int) -> None:
    # Path L reads keys as seconds unless tsdbResolution is 2 (msResolution:true); JS keeps
    # 13-digit keys in the server's order, so they must ascend (contract §2.1.5).
    settings = gr.Settings(3, resolution, 1000)
    [request] = requests("L", [target(tags={"host": "*"})], settings)
    assert f'"msResolution":{"true" if resolution == 2 else "false"}' in (request.body or "")
    response = send(grafana, request)
    assert response.status_code == 200
    scale = 1000 if resolution == 2 else 1
    for series in strict_json(response):  # dicts keep the order the server wrote
        assert list(series["dps"]) == [str(ts * scale) for ts in WEB01]


def test_16_arrays_only_when_the_query_string_asks(grafana: FlaskClient) -> None:
    # Path B with "==2.4" adds ?arrays=true and reads [[ts, value], ...] in order (§2.2).
    [request] = requests("B", [target(tags={"host": "web01"})], V4)
    assert request.url == "/api/query?arrays=true"
    [series] = ok(send(grafana, request))
    assert series["dps"] == [[ts, value] for ts, value in WEB01.items()]
    # Path L with "==2.4" sends exactly what v2 sends and reads an object.
    [request] = requests("L", [target(tags={"host": "web01"})], V4)
    assert request.url == "/api/query"
    [series] = ok(send(grafana, request))
    assert isinstance(series["dps"], dict)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("fill", ["nan", "null"])
def test_17_no_bare_nan_token(grafana: FlaskClient, path: str, fill: str) -> None:
    # Q14: pytsd keeps OpenTSDB's quoted "NaN" for fill nan and null for fill null
    # (docs/query-differences.md); never an unparseable NaN token.
    [request] = requests(path, [downsampled("1m", "avg", fill)])
    [series] = ok(send(grafana, request))  # strict parse
    missing = [v for v in points(series).values() if not isinstance(v, float)]
    assert missing and set(missing) == ({"NaN"} if fill == "nan" else {None})


def test_18_show_query_index_maps_series_to_targets(grafana: FlaskClient) -> None:
    # Q8: v3 on path L maps each series by query.index, the position in `queries` (the hidden
    # target is not sent, so C is index 1).
    targets = [target("A", tags={"host": "web01"}),
               target("B", hide=True),
               target("C", metric="sys.cpu.system", tags={"host": "*"})]
    [request] = requests("L", targets, V3)
    assert '"showQuery":true' in (request.body or "")
    result = ok(send(grafana, request))
    assert all("index" in series["query"] for series in result)
    by_ref = run(grafana, "L", targets, settings=V3)
    assert [(s["metric"], s["tags"]) for s in by_ref["A"]] == \
        [("sys.cpu.user", {"host": "web01"})]
    assert [(s["metric"], s["tags"]) for s in by_ref["C"]] == \
        [("sys.cpu.system", {"host": "web01"}), ("sys.cpu.system", {"host": "web02"})]


# ------------------------------------------------------------------------------ items 19-23
@pytest.fixture
def notes(grafana: FlaskClient) -> FlaskClient:
    """A note on sys.cpu.user{host=web01} (tsuid 000001000001000001), a global one, and a
    metric that holds only a note."""
    uids = grafana.post("/api/uid/assign", data=json.dumps({"metric": ["events.deploy"]}))
    deploy_tsuid = uids.get_json()["metric"]["events.deploy"] + "000001000001"
    for note in ({"tsuid": "000001000001000001", "startTime": T0 + 90, "description": "restart",
                  "notes": "kernel", "custom": {"owner": "ops"}},
                 {"startTime": T0 + 120, "description": "freeze"},
                 {"tsuid": deploy_tsuid, "startTime": T0 + 150, "description": "v1.2.3"}):
        assert grafana.post("/api/annotation", data=json.dumps(note)).status_code == 200
    return grafana


@pytest.mark.parametrize("path", PATHS)
def test_19_series_and_global_annotations(notes: FlaskClient, path: str) -> None:
    # Per-series notes by default; global ones when L asks, and (pytsd) unasked on B.
    [series] = run(notes, path, [target(tags={"host": "web01"})])["A"]
    assert series["annotations"] == [{"tsuid": "000001000001000001", "description": "restart",
                                      "notes": "kernel", "custom": {"owner": "ops"},
                                      "endTime": 0, "startTime": T0 + 90}]
    assert series["globalAnnotations"] == [{"tsuid": "", "description": "freeze", "notes": "",
                                            "endTime": 0, "startTime": T0 + 120}]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("metric", "description"),
                         [("sys.cpu.user", "restart"), ("events.deploy", "v1.2.3")])
def test_20_annotation_query(notes: FlaskClient, path: str, metric: str,
                             description: str) -> None:
    # The annotation query: sum over the metric, no downsample (contract §1.7). L reads only
    # response[0]; B copies description and startTime from every series. A metric that holds
    # only notes still answers with a series (OpenTSDB's span-less group).
    if path == "L":
        request = gr.legacy_annotation_request(metric, START_S * 1000, V3)
        result = ok(send(notes, request))
        events = result[0]["annotations"]
    else:
        request = gr.backend_annotation_request(metric, START_S, END_S, V3)
        events = [n for s in ok(send(notes, request)) for n in s.get("annotations", [])]
    start_s = T0 + (90 if metric == "sys.cpu.user" else 150)  # read as epoch seconds (Q9)
    assert [(n["description"], n["startTime"]) for n in events] == [(description, start_s)]


def test_21_one_post_or_one_post_per_target_give_the_same_series(grafana: FlaskClient) -> None:
    targets = [target("A", tags={"host": "web01"}),
               target("B", metric="sys.cpu.system", aggregator="max"),
               target("C", tags={"host": "*"}, disableDownsampling=False,
                      downsampleInterval="1h", downsampleAggregator="sum")]
    assert len(requests("L", targets)) == 1 and len(requests("B", targets)) == 3
    legacy, backend = run(grafana, "L", targets), run(grafana, "B", targets)
    for ref_id in ("A", "B", "C"):
        assert [by_host([s]) for s in legacy[ref_id]] == [by_host([s]) for s in backend[ref_id]]
    assert by_host(legacy["B"]) == {None: {ts: max(WEB01[ts], WEB02[ts]) for ts in WEB01}}
    assert by_host(legacy["C"]) == {"web01": {T0: 7140.0, T0 + 3600: 21540.0, T0 + 7200: 16470.0},
                                    "web02": {T0: 28679.0, T0 + 3600: 14580.0, T0 + 7200: 1891.0}}


BAD_BODIES = [
    '{"start":0,"end":0,"queries":null}',  # BE CreateRequest with no queries
    '{"start":1356998400,"queries":[]}',
    '{"start":1356998400,"queries":[{"metric":"sys.cpu.user","aggregator":"SUM"}]}',
    '{"start":1356998400,"queries":[{"metric":"sys.cpu.user","aggregator":"sum",'
    '"filters":[{"type":"bogus","tagk":"host","filter":"x"}]}]}',
    '{"start":1356998400,"queries":[{"metric":"sys.cpu.user","aggregator":"sum",'
    '"filters":[{"type":"regexp","tagk":"host","filter":"(unclosed"}]}]}',
    '{"start":1356998400,"queries":[{"metric":"sys.cpu.user","aggregator":"sum",'
    '"downsample":"1m-avg-bogus"}]}',
    '{"start":1356998400,"queries":[{"metric":"sys.cpu.user","aggregator":"sum",'
    '"rate":true,"rateOptions":{"counter":"yes please","counterMax":"lots"}}]}',
    '{"start":"yesterday","queries":[{"metric":"sys.cpu.user","aggregator":"sum"}]}',
    '{"start":1356998400,"queries":[{"metric":"sys.cpu.user","aggregator":"sum"}]',
    '[1, 2, 3]',
    '',
]


@pytest.mark.parametrize("body", BAD_BODIES)
def test_22_errors_are_json_with_a_4xx_status(grafana: FlaskClient, body: str) -> None:
    # Q13: non-2xx, {"error":{"code","message"}}; bad input is never a 500.
    response = grafana.post("/api/query", data=body, content_type="application/json")
    assert 400 <= response.status_code < 500, response.get_data(as_text=True)
    error = strict_json(response)["error"]
    assert error["code"] == response.status_code
    assert isinstance(error["message"], str) and error["message"]


@pytest.mark.parametrize(("fields", "message"), [
    ({"metric": ""}, "Missing the metric or tsuids, provide at least one"),
    ({"aggregator": ""}, "Missing the aggregation function"),
    ({"metric": "no.such.metric"}, "No such name for 'metrics': 'no.such.metric'"),
])
def test_23_empty_metric_or_aggregator_and_unknown_metric(grafana: FlaskClient,
                                                          fields: dict[str, Any],
                                                          message: str) -> None:
    # Path B can send "" for either (Q16): a clear 400, not a 500. The model drops a target
    # with an empty metric, so the body is built as BuildMetric would.
    metric = {"aggregator": "sum", "metric": "sys.cpu.user", **fields}
    response = send(grafana, gr.backend_query(metric, START_S, END_S, V3))
    assert response.status_code == 400
    assert strict_json(response)["error"]["message"] == message
