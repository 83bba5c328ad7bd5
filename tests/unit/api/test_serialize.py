"""``/api/query`` response JSON: spec §2.9, §5.5 and §9 cases A.1, A.7, C.30-31, E.43-46,
plus ``TestHttpJsonSerializer#formatQueryAsyncV1*``. Expected text is written out by hand."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from app.api.serialize import (
    RawJson,
    dumps_opentsdb,
    java_double,
    query_echo,
    render_dps,
    serialize_results,
    stats_summary,
)
from app.engine.model import GroupResult
from app.query.ast import Downsample, Filter, Query, RateOptions, SubQuery

START_MS, END_MS = 1356998400000, 1357041600000
NOTE = {"startTime": 1356998490, "custom": None, "tsuid": "000001000001000001",
        "endTime": 0, "description": "Hello DiscWorld!", "notes": "Millenium hand and shrimp"}


def group(ts_ms: list[int], values: list[float], is_int: bool = True, index: int = 0,
          **extra: Any) -> GroupResult:
    return GroupResult(metric=extra.pop("metric", "sys.cpu.user"),
                       tags=extra.pop("tags", {"host": "web01"}),
                       aggregate_tags=extra.pop("aggregate_tags", []),
                       tsuids=extra.pop("tsuids", ["000001000001000001"]),
                       ts_ms=np.array(ts_ms, dtype=np.int64),
                       values=np.array(values, dtype=np.float64), is_int=is_int,
                       query_index=index, **extra)


def query(*subs: SubQuery, **flags: Any) -> Query:
    return Query(start_ms=START_MS, end_ms=END_MS,
                 queries=subs or (SubQuery("sum", metric="sys.cpu.user"),), **flags)


@pytest.mark.parametrize(("value", "text"), [
    # Java Double.toString: positional in [1e-3, 1e7), else E notation (spec §2.9 item 8)
    (2.5, "2.5"), (301.0, "301.0"), (0.0, "0.0"), (-0.0, "-0.0"), (0.001, "0.001"),
    (1234567.5, "1234567.5"), (0.03333333333333333, "0.03333333333333333"),
    (934998690641.5408, "9.349986906415408E11"), (0.0005, "5.0E-4"), (1e7, "1.0E7"),
    (12345678.9, "1.23456789E7"), (-2.5e10, "-2.5E10"), (1.5e-5, "1.5E-5"),
    (1e300, "1.0E300"), (1e16, "1.0E16"),
    (float("nan"), '"NaN"'), (float("inf"), '"Infinity"'), (float("-inf"), '"-Infinity"'),
])
def test_java_double(value: float, text: str) -> None:
    assert java_double(value) == text


def test_dps_integers_in_seconds() -> None:  # case A.1
    assert render_dps(np.array([1356998430000, 1356998460000]), np.array([1.0, 2.0]), True,
                      start_ms=START_MS, end_ms=END_MS) == '{"1356998430":1,"1356998460":2}'


def test_dps_doubles() -> None:  # case B.23: a double group prints 2.0, not 2
    assert render_dps(np.array([1356998430000, 1356998460000, 1356998490000]),
                      np.array([1.25, 1.5, 2.0]), False, start_ms=START_MS, end_ms=END_MS) == \
        '{"1356998430":1.25,"1356998460":1.5,"1356998490":2.0}'


def test_dps_ms_and_duplicate_second_keys() -> None:  # case E.43
    ts = np.array([1356998400500, 1356998401000, 1356998401500])
    values = np.array([1.0, 2.0, 3.0])
    assert render_dps(ts, values, True, start_ms=START_MS, end_ms=END_MS,
                      ms_resolution=True) == \
        '{"1356998400500":1,"1356998401000":2,"1356998401500":3}'
    assert render_dps(ts, values, True, start_ms=START_MS, end_ms=END_MS) == \
        '{"1356998400":1,"1356998401":2,"1356998401":3}'


def test_dps_time_filter_is_inclusive() -> None:  # spec §2.8.5
    ts = np.array([START_MS - 1000, START_MS, END_MS, END_MS + 1000])
    assert render_dps(ts, np.arange(4.0), True, start_ms=START_MS, end_ms=END_MS) == \
        '{"1356998400":1,"1357041600":2}'


def test_dps_nan_and_null() -> None:  # cases C.30 and C.31
    ts = np.array([1356998400000, 1357001400000])
    values = np.array([301.5, np.nan])
    assert render_dps(ts, values, False, start_ms=START_MS, end_ms=END_MS) == \
        '{"1356998400":301.5,"1357001400":"NaN"}'
    assert render_dps(ts, values, False, start_ms=START_MS, end_ms=END_MS, arrays=True,
                      null_for_nan=True) == '[[1356998400,301.5],[1357001400,null]]'


def test_dps_empty() -> None:
    empty = np.array([], dtype=np.int64)
    assert render_dps(empty, np.array([]), True, start_ms=START_MS, end_ms=END_MS) == "{}"
    assert render_dps(empty, np.array([]), False, start_ms=START_MS, end_ms=END_MS,
                      arrays=True) == "[]"


def test_full_series_text() -> None:  # case E.44 shape, with show_tsuids
    result = group([1356998430000, 1356998460000], [1, 2], annotations=[NOTE],
                   tsuids=["000001000001000002", "000001000001000001"])
    text = dumps_opentsdb(serialize_results(query(show_tsuids=True), [result]))
    assert text == (
        '[{"metric":"sys.cpu.user","tags":{"host":"web01"},"aggregateTags":[],'
        '"tsuids":["000001000001000001","000001000001000002"],'
        '"annotations":[{"tsuid":"000001000001000001","description":"Hello DiscWorld!",'
        '"notes":"Millenium hand and shrimp","startTime":1356998490,"endTime":0}],'
        '"dps":{"1356998430":1,"1356998460":2}}]')


def test_no_results_is_empty_array() -> None:  # case A.7, #formatQueryAsyncV1EmptyDPs
    assert dumps_opentsdb(serialize_results(query(), [])) == "[]"


def test_optional_fields_order_and_summary() -> None:
    subs = (SubQuery("sum", metric="a"), SubQuery("sum", index=1, metric="b"))
    flags = {"show_query": True, "show_tsuids": True, "show_stats": True,
             "show_summary": True, "global_annotations": True}
    note_out_of_range = {**NOTE, "startTime": 1357041601}
    glob = {"tsuid": "", "description": "Notice", "startTime": 1356998400, "endTime": 0}
    summary = stats_summary({"serializationTime": 2}, [{"emittedDPs": 1}, {"emittedDPs": 2}])
    body = serialize_results(
        query(*subs, **flags),
        [group([START_MS], [1], index=1, annotations=[NOTE, note_out_of_range]),
         group([START_MS], [1], index=0)],
        global_annotations=[glob], stats={0: {"emittedDPs": 1}, 1: {"emittedDPs": 2}},
        summary=summary)
    parsed = json.loads(dumps_opentsdb(body))
    assert list(parsed[0]) == ["metric", "tags", "aggregateTags", "query", "tsuids",
                               "annotations", "globalAnnotations", "dps", "stats"]
    assert parsed[0]["query"]["index"] == 1 and parsed[0]["query"]["metric"] == "b"
    assert parsed[0]["annotations"] == [{k: v for k, v in NOTE.items() if v is not None}]
    assert parsed[0]["stats"] == {"emittedDPs": 2}
    assert "annotations" not in parsed[1]  # only when the series has some
    assert parsed[1]["globalAnnotations"] == [glob]  # on every series
    # the summary is the last element (#formatQueryAsyncV1wStatsSummary)
    assert parsed[2] == {"statsSummary": {"serializationTime": 2, "queryIdx_00": {
        "emittedDPs": 1}, "queryIdx_01": {"emittedDPs": 2}}}


def test_no_annotations_hides_both() -> None:
    body = serialize_results(query(no_annotations=True, global_annotations=True),
                             [group([START_MS], [1], annotations=[NOTE])],
                             global_annotations=[NOTE])
    assert "annotations" not in body[0] and "globalAnnotations" not in body[0]


def test_null_fill_comes_from_the_sub_query() -> None:
    null_fill = Downsample("30s-avg-null", 30_000, 30, "s", "avg", "null")
    body = serialize_results(
        query(SubQuery("sum", metric="a", downsample=null_fill), SubQuery("sum", index=1,
                                                                          metric="a")),
        [group([START_MS], [float("nan")], False), group([START_MS], [float("nan")], False,
                                                         index=1)])
    assert [dumps_opentsdb(series["dps"]) for series in body] == [
        '{"1356998400":null}', '{"1356998400":"NaN"}']


def test_query_echo() -> None:  # spec §2.9 item 4: snake_case group_by, tags of group-bys
    sub = SubQuery("sum", index=2, metric="m", rate=True,
                   rate_options=RateOptions(counter=True, counter_max=100),
                   filters=(Filter("literal_or", "dc", "lax"),
                            Filter("wildcard", "host", "*", True)))
    echo = query_echo(sub)
    assert echo["filters"] == [{"tagk": "dc", "filter": "lax", "group_by": False,
                                "type": "literal_or"},
                               {"tagk": "host", "filter": "*", "group_by": True,
                                "type": "wildcard"}]
    assert echo["tags"] == {"host": "wildcard(*)"}
    assert echo["rateOptions"] == {"counter": True, "counterMax": 100, "resetValue": 0,
                                   "dropResets": False}
    assert (echo["index"], echo["aggregator"], echo["tsuids"], echo["downsample"]) == \
        (2, "sum", None, None)
    assert query_echo(SubQuery("sum", metric="m"))["rateOptions"] is None


def test_dumps_values() -> None:
    assert dumps_opentsdb({"a": [1, 2.5, None, True, "é\"", RawJson('{"1":2}')],
                           "b": np.int64(7), "c": float("nan")}) == \
        '{"a":[1,2.5,null,true,"é\\"",{"1":2}],"b":7,"c":"NaN"}'
    with pytest.raises(TypeError):
        dumps_opentsdb({"x": object()})
