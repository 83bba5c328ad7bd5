"""TSUID tracking's bounded cost on the embedded store: a series is tracked once per process
and clock hour (its row keys remembered, so a batch of known rows costs a set difference),
and again in the next hour; with incrementing, counts add up in memory until flushed."""

from __future__ import annotations

from pathlib import Path

from app.meta.codec import TS_COUNTER_COLUMN, TS_META_COLUMN
from app.meta.tracking import TsuidTracker
from app.tsdb import TSDB
from tests.conftest import make_tsdb

HOUR_MS = 3_600_000
ROW_A = b"\x00\x00\x01" + (1356998400).to_bytes(4, "big") + b"\x00\x00\x01\x00\x00\x01"
ROW_A_NEXT_HOUR = ROW_A[:3] + (1356998400 + 3600).to_bytes(4, "big") + ROW_A[7:]
ROW_B = ROW_A[:-3] + b"\x00\x00\x02"
TSUID_A, TSUID_B = ROW_A[:3] + ROW_A[7:], ROW_B[:3] + ROW_B[7:]
ONE_POINT = {b"t:\x00\x00": b"\x01"}


def _tsdb(tmp_path: Path) -> TSDB:
    return make_tsdb({"tsd.storage": f"sqlite:///{tmp_path / 'meta.db'}"})


def test_a_series_is_tracked_once_per_clock_hour(tmp_path: Path) -> None:
    tsdb = _tsdb(tmp_path)
    now_ms = [10 * HOUR_MS]
    tracker = TsuidTracker(tsdb.meta_table, 0, 3, realtime_ts=True, incrementing=False,
                           clock_ms=lambda: now_ms[0])
    meta = tsdb.meta_table()
    tracker.track_rows({ROW_A: ONE_POINT})
    assert set(meta.row(TSUID_A)) == {TS_META_COLUMN}
    meta.delete(TSUID_A)
    # the same series, by the same row or another hour's row: known, nothing stored again
    tracker.track_rows({ROW_A: ONE_POINT, ROW_A_NEXT_HOUR: ONE_POINT})
    assert meta.row(TSUID_A) == {}
    tracker.track_rows({ROW_B: ONE_POINT})  # a new series in the same batch size
    assert set(meta.row(TSUID_B)) == {TS_META_COLUMN}
    now_ms[0] += HOUR_MS  # the next clock hour: checked again, the missing TSMeta stored
    tracker.track_rows({ROW_A: ONE_POINT})
    assert set(meta.row(TSUID_A)) == {TS_META_COLUMN}
    assert tracker.created == 3


def test_counts_are_added_once_per_flush(tmp_path: Path) -> None:
    tsdb = _tsdb(tmp_path)
    now_ms = [10 * HOUR_MS]
    tracker = TsuidTracker(tsdb.meta_table, 0, 3, realtime_ts=True, incrementing=True,
                           flush_ms=1000, clock_ms=lambda: now_ms[0])
    meta = tsdb.meta_table()
    tracker.track_rows({ROW_A: {b"t:\x00\x00": b"\x01", b"t:\x00\x10": b"\x02"}})
    tracker.track_rows({ROW_A: ONE_POINT, ROW_B: ONE_POINT})
    assert meta.row(TSUID_A) == {}  # pending, in memory
    now_ms[0] += 1000
    tracker.track_rows({ROW_A: {b"t:\x00\x00\x00\x20": b"\x01\x02\x00"}})  # 2 compacted
    assert meta.row(TSUID_A)[TS_COUNTER_COLUMN] == (5).to_bytes(8, "big")
    assert meta.row(TSUID_B)[TS_COUNTER_COLUMN] == (1).to_bytes(8, "big")
    assert TS_META_COLUMN in meta.row(TSUID_A) and TS_META_COLUMN in meta.row(TSUID_B)
