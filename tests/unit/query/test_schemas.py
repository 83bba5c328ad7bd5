"""The POST door: spec §2.2, §8, the Grafana contract (§1.2, §3, quirks Q1, Q4, Q5, Q14-16),
and equality of both doors for equivalent requests."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.schemas import query_from_json
from app.errors import BadRequestError
from app.query.ast import LONG_MAX, Filter, RateOptions
from app.query.parse import query_from_args

NOW_MS = 1357041600000


def body(**sub: Any) -> dict[str, Any]:
    return {"start": 1356998400, "end": 1357041600,
            "queries": [{"aggregator": "sum", "metric": "sys.cpu.user", **sub}]}


@pytest.mark.parametrize(("get", "post"), [
    ({"start": ["1356998400"], "end": ["1357041600"], "m": ["sum:sys.cpu.user"]},
     {"start": 1356998400, "end": "1357041600",
      "queries": [{"aggregator": "sum", "metric": "sys.cpu.user"}]}),
    ({"start": ["1h-ago"], "m": ["avg:1m-avg-nan:rate{dropcounter,10000,35}:explicit_tags:"
                                 "sys.cpu.user{host=*}{dc=lax|dal}"],
      "ms": [""], "show_query": [""], "show_tsuids": [""], "no_annotations": [""]},
     {"start": "1h-ago", "msResolution": True, "showQuery": True, "showTSUIDs": True,
      "noAnnotations": True,
      "queries": [{"aggregator": "avg", "metric": "sys.cpu.user", "downsample": "1m-avg-nan",
                   "rate": True, "explicitTags": True,
                   "rateOptions": {"counter": True, "counterMax": 10000, "resetValue": 35,
                                   "dropResets": True},
                   "filters": [{"type": "literal_or", "tagk": "dc", "filter": "lax|dal",
                                "groupBy": False}],
                   "tags": {"host": "*"}}]}),
    ({"start": ["1356998400"], "tsuid": ["sum:rate:000001000001000001,000001000001000002"],
      "m": ["zimsum:0all-sum:sys.cpu.user{host=web0*}"], "global_annotations": [""],
      "show_stats": [""], "show_summary": [""]},
     {"start": "1356998400", "globalAnnotations": True, "showStats": True, "showSummary": True,
      "queries": [{"aggregator": "sum", "rate": True,
                   "tsuids": ["000001000001000001", "000001000001000002"]},
                  {"aggregator": "zimsum", "metric": "sys.cpu.user", "downsample": "0all-sum",
                   "tags": {"host": "web0*"}}]}),
    ({"start": ["2013/01/01"], "end": ["2013/01/02 00:00"], "timezone": ["EST"],
      "use_calendar": [""], "m": ["sum:1d-sum:x"]},
     {"start": "2013/01/01", "end": "2013/01/02 00:00", "timezone": "EST", "useCalendar": True,
      "queries": [{"aggregator": "sum", "metric": "x", "downsample": "1d-sum"}]}),
])
def test_both_doors_give_equal_queries(get: dict[str, list[str]], post: dict[str, Any]) -> None:
    # A body silent on globalAnnotations gets them (for Grafana's backend path); say false
    # explicitly to compare with GET's OpenTSDB default.
    post = {"globalAnnotations": False, **post}
    assert query_from_args(get, NOW_MS) == query_from_json(post, NOW_MS)


@pytest.mark.parametrize(("body_flag", "expected"), [(None, True), (True, True), (False, False)])
def test_global_annotations_default_on_for_json_bodies(body_flag: bool | None,
                                                        expected: bool) -> None:
    body: dict[str, Any] = {"start": 1356998400,
                            "queries": [{"aggregator": "sum", "metric": "m"}]}
    if body_flag is not None:
        body["globalAnnotations"] = body_flag
    assert query_from_json(body, NOW_MS).global_annotations is expected


def test_grafana_legacy_body() -> None:
    # grafana-opentsdb-contract.md §1.2 example: whole panel target, ms times, both keys.
    grafana = {"start": 1356998400000, "queries": [{
        "refId": "A", "datasource": {"type": "opentsdb", "uid": "x"}, "alias": "$tag_host",
        "metric": "cpu.usage", "aggregator": "sum", "downsample": "20s-avg",
        "downsampleAggregator": "avg", "downsampleFillPolicy": "none", "counterMax": "",
        "filters": [{"type": "literal_or", "tagk": "host", "filter": "web01|web02",
                     "groupBy": True}],
        "tags": {}, "hide": False}],
        "msResolution": False, "globalAnnotations": True, "showQuery": True}
    query = query_from_json(grafana, NOW_MS)
    assert query.start_ms == 1356998400000 and query.end_ms == NOW_MS
    assert query.global_annotations and query.show_query and not query.ms_resolution
    sub = query.queries[0]
    assert sub.filters == (Filter("literal_or", "host", "web01|web02", True),)
    assert sub.downsample is not None and sub.downsample.interval_ms == 20_000


@pytest.mark.parametrize("tags", [[], {}, None])
def test_empty_tags_accepted(tags: Any) -> None:  # grafana #4700/#13369: "tags": []
    assert query_from_json(body(tags=tags, filters=[]), NOW_MS).queries[0].filters == ()


def test_tags_and_filters_merge_whatever_the_order() -> None:
    filters = [{"type": "regexp", "tagk": "dc", "filter": "^l", "group_by": True}]
    first = query_from_json(body(tags={"host": "web01"}, filters=filters), NOW_MS)
    second = query_from_json(body(filters=filters, tags={"host": "web01"}), NOW_MS)
    assert first == second
    assert first.queries[0].filters == (Filter("regexp", "dc", "^l", True),
                                        Filter("literal_or", "host", "web01", True))


@pytest.mark.parametrize(("options", "expected"), [
    (None, RateOptions()),
    ({"counter": True}, RateOptions(counter=True)),
    # Grafana path B sends ParseFloat results: 45 or 2^64 (Q14); path L may send null (NaN)
    ({"counter": True, "counterMax": 45.0, "resetValue": 60}, RateOptions(True, 45, 60)),
    ({"counter": True, "counterMax": 1.8446744073709552e19}, RateOptions(True, LONG_MAX)),
    ({"counter": True, "counterMax": None, "resetValue": None}, RateOptions(counter=True)),
    ({"counter": "true", "counterMax": "100"}, RateOptions(True, 100)),
    ({"counter": True, "counterMax": float("nan")}, RateOptions(counter=True)),
])
def test_rate_options(options: Any, expected: RateOptions) -> None:
    sub = query_from_json(body(rate=True, rateOptions=options), NOW_MS).queries[0]
    assert sub.rate and sub.rate_options == expected


def test_tsuids_win_over_metric_and_filters() -> None:
    sub = query_from_json(body(tsuids=["000001000001000001"], tags={"host": "x"}),
                          NOW_MS).queries[0]
    assert sub.tsuids == ("000001000001000001",) and sub.metric is None and sub.filters == ()


def test_flags_and_strings() -> None:
    raw = body(explicitTags="true", percentiles=[99.9, 50], downsample="")
    raw.update(delete=True, showStats="true", end=None)
    query = query_from_json(raw, NOW_MS, arrays=True)
    assert query.delete and query.show_stats and query.arrays and query.end_ms == NOW_MS
    sub = query.queries[0]
    assert sub.explicit_tags and sub.percentiles == (50.0, 99.9) and sub.downsample is None


def test_calendar_day_in_timezone() -> None:  # spec §9 case 34 (request side)
    query = query_from_json({"start": 1357016400, "end": 1357146000, "timezone": "EST",
                             "useCalendar": True, "queries": [
                                 {"aggregator": "sum", "metric": "m", "downsample": "1d-sum"}]},
                            NOW_MS)
    downsample = query.queries[0].downsample
    assert query.timezone == "EST" and downsample is not None and downsample.calendar


@pytest.mark.parametrize(("raw", "message", "details"), [
    (None, "Missing message content",
     "Supply valid JSON formatted data in the body of your request"),
    ([1], "Unable to parse the given JSON", "The query must be a JSON object"),
    ({"start": "1h-ago", "queries": "x"}, "Unable to parse the given JSON", None),
    ({"start": "1h-ago", "queries": [{"aggregator": "sum", "metric": "m", "rate": "maybe"}]},
     "Unable to parse the given JSON", None),
    # unknown filter type: Jackson fails inside the builder (§2.2)
    (body(filters=[{"type": "nope", "tagk": "host", "filter": "x"}]),
     "Unable to parse the given JSON", "Could not find a tag value filter of the type: nope"),
    (body(tags={"host": "regexp(web"}), "Unable to parse the given JSON",
     "Filter must end with a ')': regexp(web"),
    # OpenTSDB: 500 NullPointerException; here a 400
    ({"start": "1h-ago"}, "Missing queries", None),
    ({"start": "1h-ago", "queries": []}, "Missing queries", None),
    ({"queries": []}, "Missing start time", None),
    (body(aggregator=""), "Missing the aggregation function", None),  # Grafana Q16
    (body(metric=""), "Missing the metric or tsuids, provide at least one", None),
    (body(downsample="1m-"), "Invalid downsampling specifier '1m-': must provide at least "
                             "interval and function", None),
    ({"start": 1357041600, "end": 1356998400, "queries": [{"aggregator": "sum",
                                                            "metric": "m"}]},
     "End time [1356998400000] must be greater than the start time [1357041600000]", None),
])
def test_errors(raw: Any, message: str, details: str | None) -> None:
    with pytest.raises(BadRequestError) as info:
        query_from_json(raw, NOW_MS)
    assert info.value.code == 400
    assert info.value.message == message
    if details is not None:
        assert info.value.details == details
