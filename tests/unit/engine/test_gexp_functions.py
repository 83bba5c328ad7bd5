"""The gexp functions over hand-made series; every expected value is worked out by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from app.engine.gexp_eval import _java_hash_order, evaluate_tree, tree_text
from app.engine.gexp_functions import FUNCTIONS, GexpContext
from app.engine.model import GroupResult
from app.errors import BadRequestError
from app.query.gexp import parse_expressions

CTX = GexpContext(start_ms=0, end_ms=10_000_000)


def series(values: list[Any], *, metric: str = "m", tags: dict[str, str] | None = None,
           agg: list[str] | None = None, step_ms: int = 60_000) -> GroupResult:
    """Integers stay integers; floats (and NaN) are doubles."""
    mask = np.array([isinstance(v, int) for v in values], dtype=bool)
    return GroupResult(metric=metric, tags=dict(tags or {}), aggregate_tags=list(agg or []),
                       tsuids=["0001"], ts_ms=np.arange(len(values), dtype=np.int64) * step_ms,
                       values=np.array(values, dtype=np.float64), is_int=bool(mask.all()),
                       query_index=0, int_mask=mask)


def run(name: str, inputs: list[list[GroupResult]], *params: str) -> list[GroupResult]:
    return FUNCTIONS[name].evaluate(CTX, inputs, list(params))


def printed(result: GroupResult) -> list[Any]:
    """Each value as it will print: int for integer points, float otherwise."""
    mask = result.int_mask if result.int_mask is not None else [result.is_int] * result.values.size
    return [int(v) if is_int else float(v) for v, is_int in zip(result.values, mask, strict=True)]


def error(name: str, inputs: list[list[GroupResult]], *params: str) -> str:
    with pytest.raises(BadRequestError) as caught:
        run(name, inputs, *params)
    return caught.value.message


def test_scale_keeps_integers_only_for_an_integer_factor() -> None:
    mixed = series([2, 2.5, -3])
    assert [type(v) for v in printed(run("scale", [[mixed]], "3")[0])] == [int, float, int]
    assert printed(run("scale", [[mixed]], "3")[0]) == [6, 7.5, -9]
    assert printed(run("scale", [[mixed]], "0.5")[0]) == [1.0, 1.25, -1.5]
    assert printed(run("scale", [[mixed]], "-0")[0]) == [0, -0.0, 0]


@pytest.mark.parametrize(("param", "message"), [
    ("x", "Unparseable scale factor value: 0.0"), ("1e3", "Unparseable scale factor value: 0.0"),
    ("1.2.3", "Invalid parameter, must be an integer or floating point"),
    ("-", "Invalid parameter, must be an integer or floating point")])
def test_scale_errors(param: str, message: str) -> None:
    assert error("scale", [[series([1])]], param) == message
    assert error("scale", [[series([1])]]) == "Missing scaling factor"


def test_no_series_argument_gives_no_series() -> None:
    assert run("scale", [], "2") == [] and run("sumSeries", []) == []


def test_absolute() -> None:
    out = run("absolute", [[series([-2, 3.5, -0.25])], [series([5])]])
    assert [printed(r) for r in out] == [[2, 3.5, 0.25], [5]]


def test_alias_templates_with_the_series_tags() -> None:
    base = series([-1, 2], metric="cpu", tags={"host": "web01", "dc": "lga"}, agg=["core"])
    out = run("alias", [[base], [series([7])]], "@host-@dc", "x")
    assert [(r.metric, r.tags, r.aggregate_tags) for r in out] == [
        ("web01-lga,x", {}, []), ("@host-@dc,x", {}, [])]  # the second series has no tags
    assert printed(out[0]) == [-1, 2]  # values unchanged (OpenTSDB 2.4.1: absolute)
    assert error("alias", [[base]]) == "Missing the alias"


def test_moving_average_over_a_count_skips_nan() -> None:
    out = run("movingAverage", [[series([1, math.nan, 3, 5])]], "2")[0]
    assert printed(out) == [0.0, 0.0, 2.0, 4.0]


def test_moving_average_over_a_time_window() -> None:
    out = run("movingAverage", [[series([1, 2, 3, 4])]], "'2min'")[0]
    # 0 until a point two minutes old exists; then the points newer than two minutes
    assert printed(out) == [0.0, 0.0, 2.5, 3.5]


@pytest.mark.parametrize(("param", "message"), [
    ("0", "Moving average window must be an integer greater than zero"),
    ("abc", "Unparseable window size: abc"), ("'5y'", "Unknown time unit=y in window='5y'"),
    ("'min'", "Invalid moving window parameter: 'min'"),
    ("99999999999", "Invalid parameter, must be an integer")])
def test_moving_average_errors(param: str, message: str) -> None:
    assert error("movingAverage", [[series([1])]], param) == message


def test_highest_current_and_highest_max() -> None:
    a, b = series([1, 50, 3], tags={"host": "a"}), series([10, -20, 30], tags={"host": "b"})
    assert run("highestMax", [[a, b]], "1") == [a]
    assert run("highestCurrent", [[a], [b]], "1") == [b]
    assert run("highestMax", [[a, b]], "5") == [a, b]


def test_highest_max_floats_start_at_the_smallest_positive_double() -> None:
    """OpenTSDB starts a double maximum at Double.MIN_VALUE (4.9e-324, not -inf): below zero
    every float series ties and keeps its order; integer maxima start at Long.MIN_VALUE."""
    a, b = series([-5.5, -1.5]), series([-0.5, -9.5])
    assert run("highestMax", [[a, b]], "1") == [a]
    c, d = series([-5, -3]), series([-1, -2])
    assert run("highestMax", [[c, d]], "1") == [d]


def test_highest_ranks_nan_first() -> None:
    a, b = series([1.5, 2.5]), series([3.5, math.nan])
    assert run("highestCurrent", [[a, b]], "1") == [b]


def test_highest_errors() -> None:
    assert error("highestMax", [[series([1])]], "0") == "Top n value must be greater than zero: 0"
    assert error("highestCurrent", [[series([1])]], "x") == "Unparseable top n value: x"


def test_sum_series_joins_on_tags_and_fills_zero() -> None:
    cpu_a = series([1, 2], metric="cpu", tags={"host": "a"}, agg=["dc"])
    cpu_b = series([10, 20], metric="cpu", tags={"host": "b"})
    mem_a = series([0.5, 0.25], metric="mem", tags={"host": "a"}, agg=["core"])
    mem_c = series([4.0, 5.0], metric="mem", tags={"host": "c"})
    out = run("sumSeries", [[cpu_a, cpu_b], [mem_a, mem_c]])
    assert [(r.metric, r.tags, r.aggregate_tags, printed(r)) for r in out] == [
        ("cpu", {"host": "a"}, ["core", "dc"], [1.5, 2.25]),
        ("cpu", {"host": "b"}, [], [10.0, 20.0]),
        ("mem", {}, [], [4.0, 5.0])]  # the first argument has no host=c: no tags
    assert all(r.tsuids == [] and r.show_empty_annotations for r in out)


def test_series_arithmetic_left_to_right() -> None:
    a, b, c = series([8, 9]), series([2, 0]), series([4, 3])
    assert printed(run("diffSeries", [[a], [b], [c]])[0]) == [2.0, 6.0]
    assert printed(run("multiply", [[a], [b], [c]])[0]) == [64.0, 0.0]
    assert printed(run("divide", [[a], [b]])[0]) == [4.0, 0.0]  # x / 0 gives 0


def test_series_arithmetic_pairs_points_by_timestamp() -> None:
    a = series([1, 2, 3])
    b = GroupResult(metric="m", tags={}, aggregate_tags=[], tsuids=[],
                    ts_ms=np.array([60_000, 180_000]), values=np.array([10.0, 100.0]),
                    is_int=False, query_index=0)
    out = run("sum", [[a], [b]])[0]
    assert out.ts_ms.tolist() == [0, 60_000, 120_000, 180_000]
    assert printed(out) == [1.0, 12.0, 3.0, 100.0]


def test_series_arithmetic_arity() -> None:
    assert error("sumSeries", [[series([1])]]) == "Must have 2 to 26 series, got 1 instead"
    assert error("divideSeries", [[series([1])]] * 27) == "Must have 2 to 26 series, got 27 instead"


def test_time_shift() -> None:
    out = run("timeShift", [[series([1, 2.5])], [series([9])]], "'2min'")
    assert [(r.ts_ms.tolist(), printed(r)) for r in out] == [([120_000, 180_000], [1, 2.5])]
    assert run("shift", [[series([1])]], "'1week'")[0].ts_ms.tolist() == [604_800_000]


@pytest.mark.parametrize(("param", "message"), [
    ("1", "Invalid timeshift parameter: eg '10min'"),
    ("'1min", "Invalid timeshift parameter: eg '10min'"),
    ("'5y'", "unknown time unit=y'"), ("'0min'", "timeshift <= 0"),
    ("'min'", "Invalid Parameter: 'min'")])
def test_time_shift_errors(param: str, message: str) -> None:
    assert error("timeShift", [[series([1])]], param) == message


def test_tree_text_and_a_parameter_before_a_series() -> None:
    trees, _ = parse_expressions(["alias(scale(sum:a{x=y},2),sum:1m-avg:b,z)",
                                  "scale(2,sum:c)"], FUNCTIONS)
    assert tree_text(trees[0]) == "alias(scale(a),b,z)"
    with pytest.raises(BadRequestError) as caught:
        evaluate_tree(trees[1], [[], [], [series([1])]], CTX)
    assert caught.value.message == "Unknown parameter type: null in tree: scale(c)"


def test_java_hash_order_of_leaf_indexes() -> None:
    assert _java_hash_order([3, 1, 2]) == [1, 2, 3]
    assert _java_hash_order([15, 16]) == [16, 15]  # 16 lands in bucket 0 of 16


def test_moving_average_of_a_long_series_with_a_wide_window() -> None:
    """Past EXACT_WORK the sums come from prefix sums: over 0, 1, 2, ... the average of the
    last w values at point i is i - (w - 1) / 2."""
    n, w = 5000, 1000
    ramp = series(list(range(n)), step_ms=1000)
    out = run("movingAverage", [[ramp]], str(w))[0]
    assert n * w > 2_000_000
    assert out.values[: w - 1].tolist() == [0.0] * (w - 1)
    expected = [i - (w - 1) / 2 for i in range(w - 1, n)]
    assert out.values[w - 1:].tolist() == pytest.approx(expected, rel=1e-12)
    timed = run("movingAverage", [[ramp]], f"'{w}s'")[0]
    # a 1000 s window holds the points less than 1000 s old: the last 1000 again,
    # full from the point at 1000 s
    assert timed.values[:w].tolist() == [0.0] * w
    assert timed.values[w:].tolist() == pytest.approx(expected[1:], rel=1e-12)
