"""Rows as a grid (``rollup_columns.grid_of``) and their buckets in matrix steps
(``rollup_grid.GridBuckets``), on rows written here by hand."""

from __future__ import annotations

import numpy as np

from app.storage.codec_rollup import HEAD_DTYPE, column_padding
from app.tsdb.read import rollup_columns
from app.tsdb.read.rollup_grid import GridBuckets

METRIC = b"\x00\x00\x01"  # no salt: the base time at byte 3
DAY = 86400


def _key(base_s: int, host: int) -> bytes:
    return METRIC + base_s.to_bytes(4, "big") + b"\x00\x00\x01\x00\x00" + bytes([host])


def _blob(rows: list[tuple[int, int, list[float]]]) -> bytes:
    """Row columns (``codec_rollup.column_parts``' layout) of full rows: cells at
    offsets 0, 1, ..., doubles, not integers."""
    out = []
    for base_s, host, values in rows:
        key = _key(base_s, host)
        head = np.array([(len(key), len(values), 8 * len(values), 1)], HEAD_DTYPE)
        body = (np.array(values, "<f8").tobytes() + np.arange(len(values)).astype("<u2").tobytes()
                + bytes(len(values)))
        out.append(head.tobytes() + key + bytes(column_padding(len(key))) + body
                   + bytes(-len(body) % 8))
    return b"".join(out)


def _part(rows: list[tuple[int, int, list[float]]]) -> rollup_columns.Part:
    return rollup_columns.part_of(_blob(rows))


def test_runs_out_of_time_order_are_put_in_it_series_after_series() -> None:
    # Days 2 and 3 (as a block holds them), then day 1 (an end read row by row).
    rows = [(2 * DAY, 1, [20.0, 21.0]), (2 * DAY, 2, [120.0, 121.0]),
            (3 * DAY, 1, [30.0, 31.0]), (3 * DAY, 2, [130.0, 131.0]),
            (1 * DAY, 1, [10.0, 11.0]), (1 * DAY, 2, [110.0, 111.0])]
    part = _part(rows)
    grid = rollup_columns.grid_of([part], 3)
    assert grid is not None
    assert grid.series == 2 and grid.base_s.tolist() == [DAY, 2 * DAY, 3 * DAY]
    assert grid.first_keys() == [_key(DAY, 1), _key(DAY, 2)]
    assert rollup_columns.series_major(part.values, grid).tolist() == [
        [10.0, 11.0, 20.0, 21.0, 30.0, 31.0], [110.0, 111.0, 120.0, 121.0, 130.0, 131.0]]


def test_rows_that_are_no_grid_are_refused() -> None:
    missing = [(DAY, 1, [1.0]), (DAY, 2, [2.0]), (2 * DAY, 1, [3.0])]
    assert rollup_columns.grid_of([_part(missing)], 3) is None
    other_series = [(DAY, 1, [1.0]), (DAY, 2, [2.0]), (2 * DAY, 1, [3.0]), (2 * DAY, 3, [4.0])]
    assert rollup_columns.grid_of([_part(other_series)], 3) is None
    unordered = [(DAY, 2, [1.0]), (DAY, 1, [2.0])]
    assert rollup_columns.grid_of([_part(unordered)], 3) is None
    uneven = [(DAY, 1, [1.0, 2.0]), (DAY, 2, [3.0])]
    assert rollup_columns.grid_of([_part(uneven)], 3) is None


def test_buckets_of_several_cells_and_counts_of_zero() -> None:
    # Two series, two days of three hourly cells (00:00, 01:00, 02:00); 2-hour buckets from
    # day 1, 02:00 to day 2, 02:00 (exclusive): day 1's 02:00 alone, day 2's 00:00 and 01:00.
    sums = _part([(DAY, 1, [1.0, 2.0, 4.0]), (DAY, 2, [8.0, 16.0, 32.0]),
                  (2 * DAY, 1, [64.0, 128.0, 256.0]), (2 * DAY, 2, [512.0, 1024.0, 2048.0])])
    counts = _part([(DAY, 1, [1.0, 2.0, 2.0]), (DAY, 2, [1.0, 1.0, 0.0]),
                    (2 * DAY, 1, [4.0, 4.0, 4.0]), (2 * DAY, 2, [2.0, 2.0, 2.0])])
    grid = rollup_columns.grid_of([sums, counts], 3)
    assert grid is not None
    first_ms, end_ms, step_ms = (DAY + 7200) * 1000, (2 * DAY + 7200) * 1000, 7_200_000
    total = GridBuckets.of([sums], grid, 3600, first_ms, end_ms, step_ms, "sum")
    assert total is not None
    ts_ms, values, offsets = total.series(np.arange(2))
    stamps = [(DAY + 7200) * 1000, 2 * DAY * 1000]
    assert ts_ms.tolist() == stamps * 2 and offsets.tolist() == [0, 2, 4]
    assert values.tolist() == [4.0, 192.0, 32.0, 1536.0]
    average = GridBuckets.of([sums, counts], grid, 3600, first_ms, end_ms, step_ms, "avg")
    assert average is not None
    ts_ms, values, offsets = average.series(np.arange(2))
    # Series 2's first bucket has a count of 0: left out.
    assert ts_ms.tolist() == stamps + stamps[1:] and offsets.tolist() == [0, 2, 3]
    assert values.tolist() == [4.0 / 2, 192.0 / 8, 1536.0 / 4]
    ts_ms, values, offsets = average.series(np.array([1]))  # series 2 only
    assert ts_ms.tolist() == stamps[1:] and values.tolist() == [1536.0 / 4]
    # No cell inside the read: no buckets this way (the rows path answers).
    assert GridBuckets.of([sums], grid, 3600, 0, 3_600_000, step_ms, "sum") is None
