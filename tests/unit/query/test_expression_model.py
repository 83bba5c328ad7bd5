"""The ``/api/query/exp`` body: reading it as 2.4's builders do, validating in 2.4's order.

Expected messages are OpenTSDB 2.4.1's, observed on the real TSD for the same bodies, except
where 2.4.1 prints a Jackson exception (docs/differences.md): there pytsd names the cause.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.query.expression.model import ExpQueryError, FillPolicy, Join, parse_exp_query
from app.query.expression.validate import validate_exp_query

NOW_MS = 1_700_000_000_000
TIME = {"start": "1357084800", "end": "1357085400", "aggregator": "sum"}
A = {"id": "a", "metric": "ex.a"}


def check(body: Any) -> Any:
    return validate_exp_query(parse_exp_query(body), NOW_MS)


@pytest.mark.parametrize("body, message", [
    ({}, "missing time"),
    ({"time": {}}, "Invalid time"),
    ({"time": {"start": "1357084800"}}, "Invalid time"),
    ({"time": {**TIME, "aggregator": "bogus"}}, "Invalid time"),
    ({"time": {**TIME, "start": "yesterday"}}, "Invalid time"),
    ({"time": {**TIME, "downsampler": {"interval": "1m"}}, "metrics": [A]}, "Invalid time"),
    ({"time": {**TIME, "downsampler": {"interval": "1x", "aggregator": "sum"}},
      "metrics": [A]}, "Invalid time"),
    ({"time": TIME}, "missing or empty metrics"),
    ({"time": TIME, "metrics": []}, "missing or empty metrics"),
    ({"time": TIME, "metrics": [{"metric": "ex.a"}]}, "Invalid metric at index 0"),
    ({"time": TIME, "metrics": [A, {"id": "b"}]}, "Invalid metric at index 1"),
    ({"time": TIME, "metrics": [{"id": "a-b", "metric": "m"}]}, "Invalid metric at index 0"),
    ({"time": TIME, "metrics": [{"id": "1", "metric": "m"}]}, "Invalid metric at index 0"),
    ({"time": TIME, "metrics": [{**A, "aggregator": "bogus"}]}, "Invalid metric at index 0"),
    ({"time": TIME, "metrics": [A, {"id": "a", "metric": "ex.b"}]}, "duplicated metric id: a"),
    ({"time": TIME, "metrics": [A], "filters": [{"id": "f"}, {"id": "f"}]},
     "duplicated filter id: f"),
    ({"time": TIME, "metrics": [A], "expressions": [{"id": "a", "expr": "a + 1"}]},
     "Duplicated variable or expression id: a"),
    ({"time": TIME, "metrics": [A], "expressions": [{"id": "e"}]},
     "Invalid expression at index 0"),
    ({"time": TIME, "metrics": [A], "expressions": [{"id": "e", "expr": "a + q"}]},
     "Expression [a + q] was missing input q"),
    ({"time": TIME, "metrics": [{**A, "filter": "f9"}]}, "No filter defined: f9"),
    ({"time": TIME, "metrics": [{**A, "filter": "f9"}], "filters": [{"id": "f1", "tags": []}]},
     "unrecognized filter id f9 in metric a"),
    ({"time": TIME, "metrics": [A], "expressions": [{"id": "e", "expr": "2"}]},
     "The expression didn't appear to have any variables"),
    ({"time": TIME, "metrics": [A], "expressions": [{"id": "e", "expr": "e + 1"}]},
     "Self referencing expression found: e"),
    ({"time": TIME, "metrics": [A], "expressions": [
        {"id": "e", "expr": "a + 1"}, {"id": "g", "expr": "e + h"}, {"id": "h", "expr": "g"}]},
     "Circular reference found: g"),
    ({"time": TIME, "metrics": [A], "expressions": [{"id": "e", "expr": "a+1",
                                                     "join": {"operator": "bogus"}}]},
     "Unrecognized set operator: bogus"),
    ({"time": TIME, "metrics": [{**A, "fillPolicy": {"policy": "bogus"}}]},
     "Unrecognized fill policy: bogus"),
    ({"time": TIME, "metrics": [{**A, "fillPolicy": {"policy": "zero", "value": 3}}]},
     "The value for ZERO must be 0"),
    ([1], "Cannot deserialize the query out of an array"),
    (None, "Incoming data was null or empty"),
])
def test_invalid_queries_get_opentsdbs_message(body: Any, message: str) -> None:
    with pytest.raises(ExpQueryError) as caught:
        check(body)
    assert str(caught.value) == message


def test_parse_errors_are_reported_unwrapped() -> None:
    with pytest.raises(ExpQueryError, match=r"^parsing error in 'a \+' at column 4"):
        check({"time": TIME, "metrics": [A], "expressions": [{"id": "e", "expr": "a +"}]})


def test_defaults_and_coercions() -> None:
    query = check({"time": {"start": 1357084800, "aggregator": "SUM", "rate": "true"},
                   "metrics": [{"id": "a", "metric": "ex.a",
                                "fillPolicy": {"policy": "NaN"}}],
                   "expressions": [{"id": "e", "expr": "a * 2"}], "unknown": 1})
    assert query.time.start == "1357084800" and query.time.rate is True
    fill = query.metrics[0].fill_policy
    assert fill.policy == "nan" and math.isnan(fill.value)
    assert query.parsed["e"].join == Join("union", False, True)
    assert query.parsed["e"].variables == ("a",)


@pytest.mark.parametrize("raw, expected", [
    ({"value": 0}, ("zero", 0.0)), ({"value": 7}, ("scalar", 7.0)),
    ({"policy": "scalar"}, ("scalar", 0.0)), ({"policy": "none"}, ("none", math.nan)),
    ({"policy": "null", "value": 0}, ("null", math.nan)),
])
def test_fill_policy_defaults(raw: dict[str, Any], expected: tuple[str, float]) -> None:
    body = {"time": TIME, "metrics": [{**A, "fillPolicy": raw}]}
    fill = check(body).metrics[0].fill_policy
    assert isinstance(fill, FillPolicy) and fill.policy == expected[0]
    assert fill.value == expected[1] or (math.isnan(fill.value) and math.isnan(expected[1]))
