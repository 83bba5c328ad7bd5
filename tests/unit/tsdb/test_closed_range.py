"""Which hours a read takes from a range entry, and how the later hours join its series."""

from __future__ import annotations

import numpy as np
import pytest

from app.engine.model import Series
from app.tsdb.hour_cache import SETTLED_MS
from app.tsdb.read.closed_ranges import closed_last_s
from app.tsdb.read.merge import merged

HOUR_S = 3600
DAY_S = 86400
BASE_S = 1_700_000_000 - 1_700_000_000 % DAY_S  # a midnight: 1699920000


@pytest.mark.parametrize("now_ms, last_s, expected", [
    # 10:00:06 (SETTLED_MS past 10:00): the 09:00 row is the newest closed one
    ((BASE_S + 10 * HOUR_S) * 1000 + SETTLED_MS + 1000, BASE_S + 23 * HOUR_S,
     BASE_S + 9 * HOUR_S),
    # 10:00:01: the 09:00 row ended less than SETTLED_MS ago: 08:00 is the newest closed
    ((BASE_S + 10 * HOUR_S) * 1000 + 1000, BASE_S + 23 * HOUR_S, BASE_S + 8 * HOUR_S),
    # every row of the read is long closed: all of them
    ((BASE_S + 30 * HOUR_S) * 1000, BASE_S + 5 * HOUR_S, BASE_S + 5 * HOUR_S),
    # the first row is still open: none
    ((BASE_S + HOUR_S) * 1000 - 1, BASE_S + 5 * HOUR_S, None),
])
def test_the_closed_rows_of_a_read(now_ms: int, last_s: int, expected: int | None) -> None:
    assert closed_last_s(BASE_S, last_s, HOUR_S, now_ms) == expected


def test_day_rows_close_at_the_end_of_their_day() -> None:
    now_ms = (BASE_S + 2 * DAY_S + HOUR_S) * 1000  # 01:00 on the third day
    assert closed_last_s(BASE_S, BASE_S + 2 * DAY_S, DAY_S, now_ms) == BASE_S + DAY_S


def series(order: bytes, ts_s: list[int], values: list[float], ints: list[bool],
           longs: list[int] | None = None) -> Series:
    return Series(tsuid=order.hex().upper(), tags={"host": order.decode()},
                  ts_ms=np.array(ts_s, np.int64) * 1000, values=np.array(values),
                  is_int=np.array(ints), row_order=order,
                  long_values=None if longs is None else np.array(longs, np.int64))


def test_later_rows_join_each_series_in_key_order() -> None:
    closed = [series(b"a", [1, 2], [1.0, 2.0], [True, True]),
              series(b"c", [1], [0.5], [False])]
    later = [series(b"b", [7], [9.0], [True]),
             series(b"a", [5], [2.0**60], [True], longs=[2**60 + 1])]
    out = merged([closed, later])
    assert [s.row_order for s in out] == [b"a", b"b", b"c"]
    a = out[0]
    assert a.ts_ms.tolist() == [1000, 2000, 5000]
    assert a.values.tolist() == [1.0, 2.0, 2.0**60]
    # the closed points' exact values are their own (integers below 2**53)
    assert a.long_values is not None and a.long_values.tolist() == [1, 2, 2**60 + 1]
    assert out[2] is closed[1]  # untouched: the kept arrays as they are


def test_pieces_out_of_time_order_join_in_time_order_with_every_note() -> None:
    # A rollup's buckets around a span it does not cover, read raw (the planner's pieces).
    rolled = [series(b"a", [0, 60, 300], [1.0, 2.0, 5.0], [False] * 3)]
    rolled[0].annotations = [{"startTime": 0}]
    raw = [series(b"a", [120, 180, 240], [3.0, 3.5, 4.0], [True, True, True])]
    raw[0].annotations = [{"startTime": 120}]
    [a] = merged([rolled, raw])
    assert a.ts_ms.tolist() == [0, 60_000, 120_000, 180_000, 240_000, 300_000]
    assert a.values.tolist() == [1.0, 2.0, 3.0, 3.5, 4.0, 5.0]
    assert a.is_int.tolist() == [False, False, True, True, True, False]
    assert a.annotations == [{"startTime": 0}, {"startTime": 120}]
    assert a.long_values is None
