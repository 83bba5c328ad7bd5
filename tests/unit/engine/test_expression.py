"""Expression evaluation (``app.engine.expression``): joins, time sync, fills, JEXL's rules.

Inputs are built by hand; every expected value is worked out in the comments.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.engine.expression import (
    Context,
    ExpressionRuntimeError,
    MetricInput,
    VarSeries,
    evaluate_expression,
)
from app.engine.expression_eval import BOOL, DOUBLE, INT, evaluate
from app.query.expression.jexl import parse, variables
from app.query.expression.model import Expression, FillPolicy, Join

HOST, DC = b"\x00\x00\x02", b"\x00\x00\x01"
WEB01, WEB02, LGA = b"\x00\x00\x02", b"\x00\x00\x03", b"\x00\x00\x01"


def series(metric: str, host: bytes, ts: list[int], values: list[float],
           dc: bool = False) -> VarSeries:
    pairs = ((DC, LGA),) if dc else ()
    pairs += ((HOST, host),)
    tags = {"dc": "lga"} if dc else {}
    tags["host"] = {WEB01: "web01", WEB02: "web02"}[host]
    return VarSeries(metric, tags, pairs, (), np.array(ts, dtype=np.int64),
                     np.array(values, dtype=np.float64))


def expression(exp_id: str, text: str, operator: str = "union", use_query_tags: bool = False,
               include_agg_tags: bool = True, fill: FillPolicy | None = None) -> Expression:
    tree = parse(text)
    return Expression(exp_id, text, Join(operator, use_query_tags, include_agg_tags), fill,
                      tree, tuple(variables(tree)))


def run(inputs: list[MetricInput], *expressions: Expression, want: str = "e"):  # noqa: ANN201
    ctx = Context({m.id: m for m in inputs}, [m.id for m in inputs],
                  {e.id or "": e for e in expressions})
    return evaluate_expression(want, ctx)


A = MetricInput("a", [series("m.a", WEB01, [1000, 2000], [1, 2]),
                      series("m.a", WEB02, [2500], [5])], frozenset())
B = MetricInput("b", [series("m.b", WEB01, [1000, 3000], [10, 30])], frozenset())


def test_union_fills_missing_points_with_zero_and_missing_series_read_zero() -> None:
    result = run([A, B], expression("e", "a + b"))
    # steps: every timestamp of every series
    assert result.timeline.tolist() == [1000, 2000, 2500, 3000]
    # web01: a = 1, 2, 0, 0 ; b = 10, 0, 0, 30 ; web02: a = 0, 0, 5, 0 and b missing (0)
    assert result.values.tolist() == [[11, 2, 0, 30], [0, 0, 5, 0]]
    assert [row.tags for row in result.rows] == [{"host": "web01"}, {"host": "web02"}]
    assert result.rows[0].metrics == {"m.a", "m.b"} and result.rows[1].metrics == {"m.a"}


def test_intersection_drops_series_and_their_timestamps() -> None:
    result = run([A, B], expression("e", "a + b", "intersection"))
    # web02 is not in b: gone, and its 2500 with it
    assert result.timeline.tolist() == [1000, 2000, 3000]
    assert result.values.tolist() == [[11, 2, 30]]


def test_no_intersection_is_an_error() -> None:
    only_web02 = MetricInput("b", [series("m.b", WEB02, [1000], [1])], frozenset())
    lone = MetricInput("a", [series("m.a", WEB01, [1000], [1])], frozenset())
    with pytest.raises(ExpressionRuntimeError, match="^No intersections found"):
        run([lone, only_web02], expression("e", "a * b", "intersection"))


def test_metric_fill_policies() -> None:
    b_nan = MetricInput("b", B.series, frozenset(), math.nan)
    b_one = MetricInput("b", B.series, frozenset(), 1.0)
    nan_row = run([A, b_nan], expression("e", "a + b", "intersection")).values[0]
    # at 2000 b has no point: NaN, so a + b is NaN
    assert nan_row[0] == 11 and math.isnan(nan_row[1]) and nan_row[2] == 30
    # b reads 1 where it has no point (2000); a keeps its zero fill (3000)
    assert run([A, b_one], expression("e", "a + b", "intersection")).values.tolist() == [
        [11, 3, 30]]


def test_use_query_tags_and_include_agg_tags_shape_the_join_key() -> None:
    with_dc = MetricInput("a", [series("m.a", WEB01, [1000], [4], dc=True)],
                          frozenset({HOST}))
    host_only = MetricInput("b", [series("m.b", WEB01, [1000], [6])], frozenset({HOST}))
    with pytest.raises(ExpressionRuntimeError):  # keys differ: dc=lga,host=web01 vs host=web01
        run([with_dc, host_only], expression("e", "a + b", "intersection"))
    joined = run([with_dc, host_only], expression("e", "a + b", "intersection", True))
    assert joined.values.tolist() == [[10]]
    # "a" comes first in 2.4's map order, so its tags (dc too) describe the row
    assert joined.rows[0].tags == {"dc": "lga", "host": "web01"}
    aggregated = VarSeries("m.b", {"host": "web01"}, ((HOST, WEB01),), ((DC, "dc"),),
                           np.array([1000]), np.array([6.0]))
    b_agg = MetricInput("b", [aggregated], frozenset({HOST}))
    with pytest.raises(ExpressionRuntimeError):  # the aggregated tag key joins the key
        run([with_dc, b_agg], expression("e", "a + b", "intersection", True))
    ignored = run([with_dc, b_agg], expression("e", "a + b", "intersection", True, False))
    assert ignored.values.tolist() == [[10]] and ignored.rows[0].agg_tags == ((DC, "dc"),)


def test_results_must_be_double_or_boolean() -> None:
    assert run([A], expression("e", "a > 1")).values.tolist() == [[0, 1, 0], [0, 0, 1]]
    with pytest.raises(ExpressionRuntimeError,
                       match=r"^Expression returned a result of type: java.lang.Integer for "):
        run([A], expression("e", "a > 1 ? 1 : 0"))


def test_nested_expressions_step_along() -> None:
    doubled = expression("e", "a * 2")
    result = run([A], doubled, expression("g", "e + a"), want="g")
    assert result.values.tolist() == [[3, 6, 0], [0, 0, 15]]
    # b has a step (3000) that e lacks: 2.4 advances e once per step and runs out
    with pytest.raises(ExpressionRuntimeError, match="^No more data$"):
        run([A, B], doubled, expression("g", "e + b"), want="g")


def test_nested_nan_reads_the_nested_fill_policy() -> None:
    b_nan = MetricInput("b", B.series, frozenset(), math.nan)
    inner = expression("e", "b * 1", fill=FillPolicy("scalar", -1.0))
    # e over b: 10, NaN, 30 at 1000, 2000... no: e's steps are b's own (1000, 3000)
    assert run([b_nan], inner).values.tolist() == [[10, 30]]
    gap = MetricInput("b", [series("m.b", WEB01, [1000, 2000], [10, math.nan])], frozenset(),
                      math.nan)
    outer = run([gap], inner, expression("g", "e + 1"), want="g")
    assert outer.values.tolist() == [[11, 0]]  # NaN read as e's fill, -1, plus 1


@pytest.mark.parametrize("text, expected, kind", [
    ("x < 1", [1, 1, 0], BOOL),        # NaN sorts below every number
    ("1 < x", [0, 0, 1], BOOL),
    ("x <= x", [1, 1, 1], BOOL),       # and NaN equals NaN in comparisons
    ("x == x", [1, 1, 1], BOOL),       # Double.equals: NaN equals NaN
    ("x == 0", [0, 1, 0], BOOL),       # numeric ==: -0.0 == 0
    ("x / 0", [0, 0, 0], DOUBLE),      # lenient division by zero: 0.0
    ("x % 2", [math.nan, -0.0, 1.5], DOUBLE),
    ("!x", [1, 1, 0], BOOL),           # NaN and 0 are false
    ("x ?: 7", [7, 7, 3.5], [INT, INT, DOUBLE]),  # per element: the Integer 7 or x
    ("-(x > 1)", [1, 1, 0], BOOL),     # minus of a Boolean negates it
    ("7 / 2", [3, 3, 3], INT),         # integer division
    ("-7 % 2", [-1, -1, -1], INT),     # Java's remainder keeps the dividend's sign
])
def test_jexl_rules(text: str, expected: list[float], kind: int | list[int]) -> None:
    x = np.array([math.nan, -0.0, 3.5])
    value = evaluate(parse(text), {"x": x}, (3,))
    np.testing.assert_array_equal(value.values, np.array(expected, dtype=np.float64))
    assert value.kinds.tolist() == (kind if isinstance(kind, list) else [kind] * 3)


def test_double_equality_tells_zero_signs_apart() -> None:
    value = evaluate(parse("x == y"), {"x": np.array([0.0]), "y": np.array([-0.0])}, (1,))
    assert value.values.tolist() == [0.0]


def test_a_long_chain_of_nested_expressions_does_not_recurse() -> None:
    chain = [expression("e0", "a + 1")]
    chain += [expression(f"e{i}", f"e{i - 1} + 1") for i in range(1, 3000)]
    result = run([A], *chain, want="e2999")
    # web01: a = 1, 2, 0 (fill) at 1000, 2000, 2500, plus 3000 ones
    assert result.values.tolist() == [[3001, 3002, 3000], [3000, 3000, 3005]]
