"""Joining the two parts of a split read (``app.engine.staged.joined_parts``): each series'
earlier buckets, then its later ones, in row-key order, in a new buffer."""

from __future__ import annotations

import numpy as np

from app.engine.flat import FlatSeries
from app.engine.staged import SeriesName, StagedPart, joined_parts
from app.query.ast import Downsample

SPEC = Downsample("1m-avg", 60_000, 1, "m", "avg")


def _name(key: bytes, note: str = "") -> SeriesName:
    notes = [{"description": note}] if note else []
    return key.hex().upper(), {"host": key.decode()}, notes, key, {}


def _part(names: list[SeriesName], lengths: list[int], first_ts: int,
          raw: list[int]) -> StagedPart:
    total = sum(lengths)
    ts_ms = np.arange(first_ts, first_ts + total, dtype=np.int64)
    offsets = np.array([0, *np.cumsum(lengths)], dtype=np.int64)
    values = (ts_ms * 0.5).astype(np.float64)
    buckets = FlatSeries(ts_ms, values, ts_ms * 0, ts_ms == ts_ms, offsets)
    return StagedPart(names, buckets, np.array(raw, dtype=np.int64))


def _rows(joined: list) -> list[tuple]:
    return [(s.row_order, s.ts_ms.tolist(), s.values.tolist(), s.raw_points,
             [n["description"] for n in s.annotations]) for s in joined]


def test_the_same_series_on_a_regular_grid() -> None:
    head = _part([_name(b"a", "x"), _name(b"b")], [2, 2], 0, [5, 6])
    later = _part([_name(b"a", "y"), _name(b"b")], [1, 1], 100, [1, 2])
    assert _rows(joined_parts(head, later, SPEC)) == [
        (b"a", [0, 1, 100], [0.0, 0.5, 50.0], 6, ["x", "y"]),
        (b"b", [2, 3, 101], [1.0, 1.5, 50.5], 8, [])]


def test_the_same_series_with_more_buckets_in_some() -> None:
    head = _part([_name(b"a"), _name(b"b")], [1, 3], 0, [1, 3])
    later = _part([_name(b"a"), _name(b"b")], [2, 0], 100, [2, 0])
    joined = joined_parts(head, later, SPEC)
    assert _rows(joined) == [(b"a", [0, 100, 101], [0.0, 50.0, 50.5], 3, []),
                             (b"b", [1, 2, 3], [0.5, 1.0, 1.5], 3, [])]
    # one read-only buffer, series after series
    assert joined[0].ts_ms.base is joined[1].ts_ms.base
    assert not joined[0].values.flags.writeable


def test_series_in_one_part_only() -> None:
    head = _part([_name(b"b"), _name(b"c")], [1, 1], 0, [1, 1])
    later = _part([_name(b"a", "late"), _name(b"c")], [2, 1], 100, [4, 1])
    joined = joined_parts(head, later, SPEC)
    assert _rows(joined) == [(b"a", [100, 101], [50.0, 50.5], 4, ["late"]),
                             (b"b", [0], [0.0], 1, []),
                             (b"c", [1, 102], [0.5, 51.0], 2, [])]
    assert all(s.downsample == SPEC and not s.is_int.any() for s in joined)


def test_nothing_shares_the_parts_memory() -> None:
    head = _part([_name(b"a")], [2], 0, [2])
    later = _part([_name(b"b")], [2], 100, [2])
    joined = joined_parts(head, later, SPEC)
    later.buckets.ts_ms[:] = -1  # the helper writes its next answer there
    assert [s.ts_ms.tolist() for s in joined] == [[0, 1], [100, 101]]
