"""``add_json_points``: a put body's points into a batch, whole when every point is of a
series the writer knows, point by point otherwise, with the same result and messages."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.tsdb.points import PointBatch, add_json_points

HOST_A = ("sys.cpu", (("host", "a"),))
HOST_B = ("sys.cpu", (("host", "b"),))


def point(timestamp: Any, value: Any, host: Any = "a") -> dict[str, Any]:
    return {"metric": "sys.cpu", "timestamp": timestamp, "value": value,
            "tags": {"host": host}}


def batch_of(raws: list[Any], known: set[object]) -> PointBatch:
    batch = PointBatch(wide_floats=True)
    add_json_points(batch, raws, known)
    return batch


def test_a_body_of_known_series_is_taken_whole() -> None:
    batch = batch_of([point(1356998400, 1), point(1356998401, -2.5, "b"),
                      point(1356998402000, 2**63 - 1)], {HOST_A, HOST_B})
    assert batch.series_of == [HOST_A, HOST_B, HOST_A]
    assert batch.series == {HOST_A: HOST_A, HOST_B: HOST_B}
    assert batch.timestamps == [1356998400, 1356998401, 1356998402000]
    assert batch.values == [1, -2.5, 2**63 - 1]
    assert batch.errors == [None, None, None]


@pytest.mark.parametrize(("bad", "message"), [
    (point(1356998401, 2**63), "Unable to parse value to a number"),       # past a long
    (point(1356998401, -(2**63) - 1), "Unable to parse value to a number"),
    (point(1356998401, True), "Unable to parse value to a number"),
    (point(1356998401, "x"), "Unable to parse value to a number"),
    (point(0, 1), "Invalid timestamp"),
    (point(True, 1), "Invalid timestamp"),
    (point(1356998401, None), "Empty value"),
    ({"metric": "sys.cpu", "timestamp": 1356998401, "value": 1, "tags": {}}, "Missing tags"),
    ({"metric": "sys.cpu", "timestamp": 1356998401, "value": 1}, "Missing tags"),
    (["not", "an", "object"], "Unable to parse the given JSON"),
], ids=["past-long", "below-long", "boolean", "text", "zero-time", "boolean-time", "null",
        "no-tags", "tags-missing", "array"])
def test_one_bad_point_among_known_ones_is_judged_alone(bad: Any, message: str) -> None:
    batch = batch_of([point(1356998400, 1), bad, point(1356998402, 3, "b")], {HOST_A, HOST_B})
    assert [e if e is None else e.message for e in batch.errors] == [None, message, None]
    assert [batch.series_of[0], batch.series_of[2]] == [HOST_A, HOST_B]
    assert [batch.values[0], batch.values[2]] == [1, 3]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 1e300])
def test_floats_beyond_a_long_go_point_by_point(value: float) -> None:
    """NaN and infinities are refused; a finite double past a long's range is a double."""
    batch = batch_of([point(1356998400, 1), point(1356998401, value)], {HOST_A})
    if math.isfinite(value):
        assert (batch.errors, batch.values) == ([None, None], [1, value])
    else:
        assert batch.errors[0] is None
        assert batch.errors[1] is not None
        assert batch.errors[1].message == "Unable to parse value to a number"


def test_an_unknown_or_odd_series_is_checked_as_the_first_time() -> None:
    """A tag value that is a number or a list never equals a known key of strings."""
    batch = batch_of([point(1356998400, 1), point(1356998401, 2, 7),
                      point(1356998402, 3, ["a"]), point(1356998403, 4, "c")], {HOST_A})
    assert batch.errors == [None, None, None, None]  # the names are the writer's to refuse
    assert batch.series_of == [HOST_A, ("sys.cpu", (("host", "7"),)),
                               ("sys.cpu", (("host", "['a']"),)), ("sys.cpu", (("host", "c"),))]
