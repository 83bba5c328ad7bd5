"""The GET door: spec §2.1, §2.3, §2.4, §5.1, §6, §8; cases from OpenTSDB's
``test/tsd/TestQueryRpc.java`` (named per test) turned into model assertions."""

from __future__ import annotations

import pytest

from app.errors import BadRequestError
from app.query.ast import LONG_MAX, Downsample, Filter, RateOptions, SubQuery
from app.query.parse import parse_downsample, parse_m, parse_tsuid_param, query_from_args

NOW_MS = 1357041600000  # 2013-01-01T12:00:00Z
START = {"start": ["1356998400"]}


def args(**params: str | list[str]) -> dict[str, list[str]]:
    out = dict(START)
    out.update({k: v if isinstance(v, list) else [v] for k, v in params.items()})
    return out


def test_plain_metric() -> None:  # #parseQueryMType
    assert parse_m("sum:sys.cpu.0", 0) == SubQuery(aggregator="sum", metric="sys.cpu.0")


@pytest.mark.parametrize("text", [
    "sum:sys.cpu.0{}", "sum:sys.cpu.0{}{}",  # #parseQueryMTypeWEmptyFilterBrackets
])
def test_empty_braces(text: str) -> None:
    assert parse_m(text, 3) == SubQuery(aggregator="sum", metric="sys.cpu.0", index=3)


def test_modifiers_in_any_order() -> None:
    # #parseQueryMTypeWExplicitAndRateAndDS / #...WExplicitAndDSAndRate
    one = parse_m("sum:explicit_tags:rate:1m-avg:sys.cpu.0{host=web01}", 0)
    two = parse_m("sum:1m-avg:rate:explicit_tags:sys.cpu.0{host=web01}", 0)
    assert one == two
    assert one.explicit_tags and one.rate and one.rate_options == RateOptions()
    assert one.downsample == Downsample(text="1m-avg", interval_ms=60_000, count=1, unit="m",
                                        function="avg")
    assert one.filters == (Filter("literal_or", "host", "web01", True),)


def test_second_brace_group_first() -> None:
    # #parseQueryMTypeWGroupByAndWildcardFilterExplicit: 2nd-group filters come first
    sub = parse_m("sum:sys.cpu.0{host=web01}{dc=*}", 0)
    assert sub.filters == (Filter("wildcard", "dc", "*", False),
                           Filter("literal_or", "host", "web01", True))


def test_group_by_duplicate_of_filter_sets_group_by() -> None:
    sub = parse_m("sum:sys.cpu.0{host=web01}{host=web01}", 0)
    assert sub.filters == (Filter("literal_or", "host", "web01", True),)


def test_unknown_modifiers_are_ignored() -> None:
    assert parse_m("sum:foo:sys.cpu.0", 0) == SubQuery("sum", metric="sys.cpu.0")


def test_histogram_modifiers() -> None:
    assert parse_m("sum:show-histogram-buckets:percentiles[99.9, 50]:sys.cpu.0", 0) == \
        SubQuery("sum", metric="sys.cpu.0", percentiles=(50.0, 99.9),
                 show_histogram_buckets=True)


def test_rollup_modifiers() -> None:
    # QueryRpc#parseMTypeSubQuery: pre-agg sets preAggregate, rollup_* is ROLLUP_USAGE.parse'd
    # (an unknown name is the default, ROLLUP_NOFALLBACK).
    assert parse_m("sum:pre-agg:rollup_1h:sys.cpu.0", 0) == SubQuery(
        "sum", metric="sys.cpu.0", pre_aggregate=True, rollup_usage="ROLLUP_NOFALLBACK")
    assert parse_m("sum:Rollup_Fallback_Raw:1h-avg:m", 0).rollup_usage == "ROLLUP_FALLBACK_RAW"
    assert parse_m("sum:rollup_raw:m", 0).rollup_usage == "ROLLUP_RAW"


def test_percentiles() -> None:
    assert parse_m("sum:percentiles[99.9,95]:m", 0).percentiles == (95.0, 99.9)


@pytest.mark.parametrize(("modifier", "expected"), [
    # spec §2.3 rate options and §9 D cases 38-41
    ("rate", RateOptions()),
    ("rate{counter}", RateOptions(counter=True)),
    ("rate{counter,100}", RateOptions(counter=True, counter_max=100)),
    ("rate{counter,10000,35}", RateOptions(counter=True, counter_max=10000, reset_value=35)),
    ("rate{dropcounter,10000,35}", RateOptions(True, 10000, 35, True)),
    ("rate{counter,,1000}", RateOptions(counter=True, counter_max=LONG_MAX, reset_value=1000)),
    ("rate{}", RateOptions()),
])
def test_rate_options(modifier: str, expected: RateOptions) -> None:
    sub = parse_m(f"sum:{modifier}:sys.cpu.0", 0)
    assert sub.rate and sub.rate_options == expected


@pytest.mark.parametrize(("text", "message"), [
    ("sum", "Invalid parameter m=sum (not enough :-separated parts)"),
    ("a:b:c:d:e:f", "Invalid parameter m=a:b:c:d:e:f (too many :-separated parts)"),
    ("", "The query string was empty"),
    # OpenTSDB: 500 (StringIndexOutOfBounds); here a 400
    ("sum::sys.cpu.0", "Invalid parameter m=sum::sys.cpu.0 (empty :-separated part)"),
    ("sum:rate{counter,abc}:m", "Max value of counter was not a number, received 'abc'"),
    ("sum:rate{counter,1,x}:m", "Reset value of counter was not a number, received 'x'"),
    ("sum:rate{a,b,c,d}:m", "Incorrect number of values in rate options specification, must "
                            "be counter[,counter max value,reset value], recieved: 4 parts"),
    ("sum:rate{:m", "Invalid rate options specification: rate{"),
    # §2.3: IllegalArgumentExceptions that OpenTSDB answers with 500
    ("sum:sys.cpu.0{host=web01", "Missing '}' at the end of: sys.cpu.0{host=web01"),
    ("sum:sys.cpu.0{host}", "When parsing tag 'host': invalid tag: host"),  # #...MissingEquals
    ("sum:sys.cpu.0{}{host=dummyfilter(*quirm)}",  # #...NoSuchFilter
     "When parsing filter 'host=dummyfilter(*quirm)': Could not find a tag value filter of "
     "the type: dummyfilter"),
    ("sum:sys.cpu.0{a=b=c}", "When parsing tag 'a=b=c': invalid tag: a=b=c"),
    ("sum:{host=web01}", "Missing the metric or tsuids, provide at least one"),
    ("sum:", "Metric cannot be null or empty"),
])
def test_m_errors_are_400(text: str, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        query_from_args(args(m=text), NOW_MS)
    assert info.value.code == 400
    assert info.value.message == message


def test_tsuid_param() -> None:  # #parseQueryTSUIDType
    sub = parse_tsuid_param(
        "sum:rate:1m-avg:explicit_tags:000001000001000001,000001000001000002", 2)
    assert sub.tsuids == ("000001000001000001", "000001000001000002")
    assert sub.metric is None and sub.index == 2 and sub.rate and sub.downsample is not None
    assert not sub.explicit_tags  # not a tsuid modifier (spec §2.4)
    assert parse_tsuid_param("sum:00000a000001000001", 0).tsuids == ("00000A000001000001",)


@pytest.mark.parametrize("text", ["sum:0001,", "sum:00001", "sum:0000XY"])
def test_tsuid_param_bad_hex(text: str) -> None:
    with pytest.raises(BadRequestError, match="^Invalid TSUID"):
        parse_tsuid_param(text + ("x" if text.endswith(",") else ""), 0)


@pytest.mark.parametrize(("text", "expected"), [
    # spec §5.1 examples (docs:api_http/query/index.rst.txt)
    ("1h-sum", Downsample("1h-sum", 3_600_000, 1, "h", "sum")),
    ("30m-avg-nan", Downsample("30m-avg-nan", 1_800_000, 30, "m", "avg", "nan")),
    ("24h-max-zero", Downsample("24h-max-zero", 86_400_000, 24, "h", "max", "zero")),
    ("1m-avg-NULL", Downsample("1m-avg-NULL", 60_000, 1, "m", "avg", "null")),
    ("500ms-avg", Downsample("500ms-avg", 500, 500, "ms", "avg")),
    ("1w-sum", Downsample("1w-sum", 604_800_000, 1, "w", "sum")),
    ("1dc-sum", Downsample("1dc-sum", 86_400_000, 1, "d", "sum", calendar=True)),
    ("0all-sum", Downsample("0all-sum", 0, 0, "all", "sum", run_all=True)),
    ("all-sum", Downsample("all-sum", 0, 0, "all", "sum", run_all=True)),
    ("1m-avg-", Downsample("1m-avg-", 60_000, 1, "m", "avg")),  # Java split drops a trailing ""
])
def test_parse_downsample(text: str, expected: Downsample) -> None:
    assert parse_downsample(text, use_calendar=False) == expected


def test_use_calendar_marks_downsample() -> None:
    assert parse_downsample("1d-sum", use_calendar=True).calendar
    assert not parse_downsample("0all-sum", use_calendar=True).calendar


@pytest.mark.parametrize(("text", "message"), [
    ("1m", "Invalid downsampling specifier '1m': must provide at least interval and function"),
    ("1m-", "Invalid downsampling specifier '1m-': must provide at least interval and function"),
    ("1m-avg-nan-x", "Invalid downsampling specifier '1m-avg-nan-x': must consist of interval, "
                     "function, and optional fill policy"),
    ("1x-avg", "Invalid duration (suffix): 1x"),
])
def test_parse_downsample_errors(text: str, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        parse_downsample(text, use_calendar=False)
    assert info.value.message == message


@pytest.mark.parametrize(("m", "message"), [
    ("SUM:sys.cpu.0", "No such aggregation function: SUM"),  # exact case (§2.7)
    ("sum:1m-badagg:sys.cpu.0", "No such downsampling function: badagg"),
    ("sum:1m-undefined:sys.cpu.0", "No such downsampling function: undefined"),  # Grafana Q15
    ("sum:1m-none:sys.cpu.0", "cannot use the NONE aggregator for downsampling"),
    # TestQueryRpc#executeWithBadDSFill
    ("sum:1m-avg-badbadbad:sys.cpu.0", "Unrecognized fill policy: badbadbad"),
    ("sum:1m-avg-scalar:sys.cpu.0",
     "Unsupported fill policy: scalar (use one of none, nan, null, zero)"),
    ("avg:percentiles[99]:sys.cpu.0",
     "Only NONE or SUM aggregation function supported for histogram query"),
    ("sum:percentiles[101]:sys.cpu.0", "Invalid percentile parameters: 101.0"),
])
def test_validation_errors(m: str, message: str) -> None:
    with pytest.raises(BadRequestError) as info:
        query_from_args(args(m=m), NOW_MS)
    assert info.value.message == message
    assert info.value.details is not None and info.value.details.startswith("TSQuery(")


def test_missing_start() -> None:  # #parseQueryStartMissing
    for params in ({"m": ["sum:x"]}, {"start": [""], "m": ["sum:x"]}):
        with pytest.raises(BadRequestError, match="^Missing parameter <code>start</code>$"):
            query_from_args(params, NOW_MS)


def test_missing_sub_queries() -> None:  # #parseQueryNoSubQuery
    with pytest.raises(BadRequestError, match="^Missing sub queries$"):
        query_from_args(args(), NOW_MS)


def test_end_before_start() -> None:  # TestTSQuery, spec §9 case 49
    with pytest.raises(BadRequestError) as info:
        query_from_args({"start": ["30m-ago"], "end": ["1h-ago"], "m": ["sum:x"]}, NOW_MS)
    assert info.value.message == ("End time [1357038000000] must be greater than the start "
                                  "time [1357039800000]")


def test_times_and_defaults() -> None:
    query = query_from_args(args(m="sum:sys.cpu.user"), NOW_MS)
    assert (query.start_ms, query.end_ms) == (1356998400000, NOW_MS)  # end defaults to now
    assert query.start_text == "1356998400" and query.end_text is None
    assert query.timezone == "UTC" and not query.ms_resolution and not query.arrays


def test_presence_flags_and_last_value_wins() -> None:
    # §1: hasQueryStringParam only checks presence, so ms=false turns ms on.
    query = query_from_args(
        {"start": ["1h-ago", "1356998400"], "m": ["sum:x"], "ms": ["false"], "arrays": [""],
         "show_tsuids": [""], "show_query": [""], "show_summary": [""], "show_stats": [""],
         "no_annotations": [""], "global_annotations": [""]}, NOW_MS)
    assert query.start_ms == 1356998400000
    assert all((query.ms_resolution, query.arrays, query.show_tsuids, query.show_query,
                query.show_summary, query.show_stats, query.no_annotations,
                query.global_annotations))


def test_tsuid_queries_come_first() -> None:
    query = query_from_args(args(m="sum:sys.cpu.user", tsuid="sum:000001000001000001"), NOW_MS)
    assert [(s.index, s.metric, s.tsuids) for s in query.queries] == [
        (0, None, ("000001000001000001",)), (1, "sys.cpu.user", ())]


def test_duplicates_dropped_keeping_request_index() -> None:
    # TestQueryRpc#executeURIDuplicates drops the repeat; we keep the original index of the
    # survivors so index-based clients still map results to their targets.
    query = query_from_args(args(m=["sum:a", "sum:a", "sum:b"]), NOW_MS)
    assert [(s.metric, s.index) for s in query.queries] == [("a", 0), ("b", 2)]


def test_timezone_and_use_calendar() -> None:
    # The docs' GET parameters (OpenTSDB 2.4 ignores them, spec §10.2; we honour them).
    query = query_from_args({"start": ["2013/01/01"], "end": ["2013/01/02"], "m": ["sum:1d-sum:x"],
                             "timezone": ["America/Denver"], "use_calendar": [""]}, NOW_MS)
    assert query.start_ms == 1357023600000 and query.timezone == "America/Denver"
    assert query.use_calendar and query.queries[0].downsample is not None
    assert query.queries[0].downsample.calendar


def test_unknown_timezone_with_downsampler() -> None:
    with pytest.raises(BadRequestError, match="^The timezone specification could not be found$"):
        query_from_args(args(m="sum:1d-sum:x", timezone="Mars/Olympus"), NOW_MS)


def test_multidict_args() -> None:
    from werkzeug.datastructures import MultiDict
    multi = MultiDict([("start", "1h-ago"), ("start", "1356998400"), ("m", "sum:a"),
                       ("m", "sum:b")])
    query = query_from_args(multi, NOW_MS)
    assert query.start_ms == 1356998400000 and len(query.queries) == 2
