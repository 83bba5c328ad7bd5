"""The Grafana request model used by the replay tests, checked against Grafana's own tests.

Every expectation below is copied by hand from a case in Grafana's test suites, as listed in
shared/notes/grafana-opentsdb-contract.md §6 (BE/opentsdb_test.go ``BuildMetric``,
FE/specs/datasource.test.ts ``metricFindQuery``) or from the prose of §1.2-1.3.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import pytest

from tests.functional import grafana_requests as gr

V3 = gr.Settings(tsdb_version=3, tsdb_resolution=1, lookup_limit=1000)
V4 = gr.Settings(tsdb_version=4, tsdb_resolution=1, lookup_limit=1000)


def build(interval_ms: int = 0, **model: Any) -> dict[str, Any]:
    base = {"metric": "cpu.average.percent", "aggregator": "avg",
            "downsampleAggregator": "avg", "downsampleFillPolicy": "none"}
    return gr.backend_metric({**base, **model}, interval_ms)


@pytest.mark.parametrize(("model", "interval_ms", "downsample"), [
    ({}, 30_000, "30s-avg"),                               # empty interval, 30 s query interval
    ({"downsampleInterval": "0.5s"}, 0, "500ms-avg"),
    ({}, 500, "500ms-avg"),
    ({"aggregator": "sum", "downsampleAggregator": "sum"}, 300_000, "5m-sum"),
    ({"downsampleAggregator": "max"}, 7_200_000, "2h-max"),
    ({"downsampleAggregator": "min"}, 172_800_000, "2d-min"),
    ({}, 0, "1m-avg"),                                     # no interval at all
    ({"downsampleInterval": "5m", "downsampleAggregator": "sum",
      "downsampleFillPolicy": "null"}, 0, "5m-sum-null"),
])
def test_backend_downsample_matches_grafana(model: dict[str, Any], interval_ms: int,
                                            downsample: str) -> None:
    assert build(interval_ms, **model)["downsample"] == downsample


def test_backend_disabled_downsampling_keeps_metric_and_aggregator_only() -> None:
    assert build(disableDownsampling=True) == {"metric": "cpu.average.percent",
                                               "aggregator": "avg"}


def test_backend_rate_options_match_grafana() -> None:
    no_counter = build(shouldComputeRate=True, isCounter=False)
    assert len(no_counter) == 5 and no_counter["rateOptions"]["counter"] is False
    counter = build(shouldComputeRate=True, isCounter=True, counterMax="45",
                    counterResetValue="60")
    assert counter["rateOptions"] == {"counter": True, "counterMax": 45, "resetValue": 60}


def test_backend_explicit_tags_only_when_true() -> None:
    assert build(explicitTags=True)["explicitTags"] is True
    assert "explicitTags" not in build(explicitTags=False)


def test_backend_body_is_seconds_and_arrays_only_for_v4() -> None:
    request = gr.backend_query({"metric": "m", "aggregator": "sum"}, 1000, 2000, V3)
    assert request.url == "/api/query"
    assert request.body == '{"start":1000,"end":2000,"queries":[{"aggregator":"sum","metric":"m"}]}'
    assert gr.backend_query({}, 0, 0, V4).url == "/api/query?arrays=true"


def test_legacy_body_key_order_and_v3_show_query() -> None:
    # §1.2: start, queries, msResolution, globalAnnotations, showQuery (v3 only), end (omitted).
    request = gr.legacy_annotation_request("cpu", 1_700_000_000_000, V3)
    assert list(json.loads(request.body or "")) == [
        "start", "queries", "msResolution", "globalAnnotations", "showQuery"]


def test_legacy_rate_drop_resets_is_not_counter_max() -> None:
    # §1.2: the misspelled `ResetValue` makes dropResets == !counterMax.
    target = {"metric": "m", "aggregator": "sum", "downsampleAggregator": "avg",
              "shouldComputeRate": True, "isCounter": True, "counterMax": "",
              "counterResetValue": "5"}
    query = gr.legacy_sub_query(target, {}, "1m", V3)
    assert query is not None
    assert query["rateOptions"] == {"counter": True, "resetValue": 5, "dropResets": True}
    assert query["downsample"] == "1m-avg"


def test_legacy_multi_value_variables_are_pipe_joined() -> None:
    target = {"metric": "m", "aggregator": "sum", "downsampleAggregator": "avg",
              "filters": [{"type": "literal_or", "tagk": "host", "filter": "$host",
                           "groupBy": True}]}
    query = gr.legacy_sub_query(target, {"host": ["a", "b"]}, "1m", V3)
    assert query is not None and query["filters"][0]["filter"] == "a|b"


def decoded(url: str) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))


@pytest.mark.parametrize(("query", "params"), [
    ("metrics(pew)", {"type": "metrics", "q": "pew", "max": "1000"}),
    ("tag_names(cpu)", {"m": "cpu", "limit": "1000"}),
    ("tag_values(cpu, hostname)", {"m": "cpu{hostname=*}", "limit": "1000"}),
    ("tag_values(cpu, hostname, env=$env)", {"m": "cpu{hostname=*,env=$env}", "limit": "1000"}),
    ("suggest_tagk(foo)", {"type": "tagk", "q": "foo", "max": "1000"}),
    ("suggest_tagv(bar)", {"type": "tagv", "q": "bar", "max": "1000"}),
])
def test_find_queries_match_grafana_specs(query: str, params: dict[str, str]) -> None:
    for request in gr.find_query_requests(query, {}, V3).values():
        assert decoded(request.url) == params


def test_distributed_format_repeats_the_key() -> None:
    # §1.3: with a multi-value variable, `env=$env` becomes `env=a,env=b`.
    requests = gr.find_query_requests("tag_values(cpu, host, env=$env)", {"env": ["a", "b"]}, V3)
    assert decoded(requests["B"].url)["m"] == "cpu{host=*,env=a,env=b}"
    assert requests["B"].url.startswith("/api/search/lookup?limit=1000&m=")  # Go sorts keys


def test_browser_encoding_keeps_commas_and_encodes_braces() -> None:
    encoded = gr.browser_query_string([("m", "cpu{host=*,dc=a b}")])
    assert encoded == "m=cpu%7Bhost%3D%2A,dc%3Da+b%7D"
