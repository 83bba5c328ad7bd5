"""The differential suite's comparison (tests/differential/compare.py): what counts as agreeing."""

from __future__ import annotations

from tests.differential.compare import compare
from tests.differential.queries import m_param


def ok(body: str) -> tuple[int, str]:
    return 200, body


def test_integer_and_float_printing_differ() -> None:
    assert compare(ok('[{"dps":{"1":1}}]'), ok('[{"dps":{"1":1.0}}]')) == [
        "$[0].dps.1: printed integer 1 vs float 1.0"]


def test_values_agree_within_a_relative_1e9() -> None:
    assert compare(ok('{"v":1.0000000001}'), ok('{"v":1.0}')) == []
    assert compare(ok('{"v":1.00001}'), ok('{"v":1.0}')) == ["$.v: 1.00001 vs 1.0"]
    assert compare(ok('{"v":"NaN"}'), ok('{"v":"NaN"}')) == []


def test_series_match_by_metric_and_tags_not_position() -> None:
    a = '[{"metric":"m","tags":{"h":"a"},"dps":{}},{"metric":"m","tags":{"h":"b"},"dps":{}}]'
    b = '[{"metric":"m","tags":{"h":"b"},"dps":{}},{"metric":"m","tags":{"h":"a"},"dps":{}}]'
    assert compare(ok(a), ok(b)) == []
    missing = compare(ok(a), ok('[{"metric":"m","tags":{"h":"a"},"dps":{}}]'))
    assert len(missing) == 1 and missing[0].startswith("$: 2 items vs 1")


def test_annotation_key_order_counts_tag_order_does_not() -> None:
    assert compare(ok('{"a":{"startTime":1,"endTime":2}}'),
                   ok('{"a":{"endTime":2,"startTime":1}}')) == [
        "$.a: key order ['startTime', 'endTime'] vs ['endTime', 'startTime']"]
    assert compare(ok('{"tags":{"a":"1","b":"2"}}'), ok('{"tags":{"b":"2","a":"1"}}')) == []


def test_errors_compare_by_status_and_message() -> None:
    def err(code: int, message: str, details: str) -> tuple[int, str]:
        return code, f'{{"error":{{"code":{code},"message":"{message}","details":"{details}"}}}}'

    assert compare(err(400, "m", "x"), err(400, "m", "y")) == []
    assert compare(err(400, "m", "x"), err(400, "n", "x")) == ["message 'm' vs 'n'"]
    assert compare(err(500, "m", ""), err(400, "m", ""))[0].startswith("status 500 vs 400")


def test_m_param_puts_group_by_filters_in_the_first_braces() -> None:
    sub = {"metric": "m", "aggregator": "sum", "rate": True,
           "rateOptions": {"counter": True, "resetValue": 5}, "downsample": "1m-avg",
           "filters": [{"type": "wildcard", "tagk": "h", "filter": "w*", "groupBy": True},
                       {"type": "regexp", "tagk": "d", "filter": "a|b", "groupBy": False}]}
    assert m_param(sub) == "sum:rate{counter,,5}:1m-avg:m{h=wildcard(w*)}{d=regexp(a|b)}"
