"""Compaction merges a finished hour row into OpenTSDB's compacted column, on every backend."""

from __future__ import annotations

import pytest

from app.tsdb import TSDB
from app.tsdb.compaction import compact_table
from app.tsdb.writer import DataPoint, PointWriter

T0 = 1346846400  # 2012-09-05 12:00:00 UTC, an hour boundary
ROW = bytes.fromhex("00000150473EC0000001000001")
# Compaction works on rows of single cells as OpenTSDB writes them; the embedded store's
# writer would otherwise hand its batches over as blocks, merged into a compacted cell.
pytestmark = pytest.mark.usefixtures("single_cells")


def write(tsdb: TSDB, *points: tuple[int, int | float]) -> None:
    errors = PointWriter(tsdb).write(
        [DataPoint("sys.cpu.nice", ts, value, {"host": "web01"}) for ts, value in points])
    assert not any(errors)


def test_mixed_second_and_ms_cells_become_one_column(tsdb: TSDB) -> None:
    write(tsdb, (T0, 18), (T0 * 1000 + 500, 4711), (T0 + 1, 42.5))
    table = tsdb.data_table()
    assert len(table.row(ROW)) == 3
    stats = compact_table(table, tsdb.layout, now_s=T0 + 7200)
    assert (stats.rows_compacted, stats.cells_merged) == (1, 3)
    # Time order: +0 s (0x0000, 1-byte 18), +500 ms (0xF0007D01, 2-byte 4711),
    # +1 s (0x001B, float 42.5); values then the meta byte 0x01 because s and ms are mixed.
    assert table.row(ROW) == {
        b"t:" + bytes.fromhex("0000 F0007D01 001B"): bytes.fromhex("12 1267 422A0000 01")}


def test_the_current_hour_is_left_alone(tsdb: TSDB) -> None:
    write(tsdb, (T0, 1), (T0 + 10, 2))
    stats = compact_table(tsdb.data_table(), tsdb.layout, now_s=T0 + 1800)
    assert stats.rows_compacted == 0
    assert len(tsdb.data_table().row(ROW)) == 2


def test_late_points_merge_with_an_existing_compacted_column(tsdb: TSDB) -> None:
    write(tsdb, (T0, 1), (T0 + 10, 2))
    table = tsdb.data_table()
    compact_table(table, tsdb.layout, now_s=T0 + 7200)
    write(tsdb, (T0 + 20, 3), (T0 + 10, 5))  # a new point and an overwrite
    compact_table(table, tsdb.layout, now_s=T0 + 7200)
    # 0x0000 -> 1, 0x00A0 -> 5 (the later write wins), 0x0140 -> 3; meta 0x00.
    assert table.row(ROW) == {b"t:" + bytes.fromhex("000000A00140"): bytes.fromhex("01050300")}


def test_annotations_survive_compaction(tsdb: TSDB) -> None:
    write(tsdb, (T0, 1), (T0 + 10, 2))
    table = tsdb.data_table()
    note = b'{"tsuid":"000001000001000001","startTime":1346846405,"description":"x"}'
    table.put(ROW, {b"t:\x01\x00\x05": note})
    compact_table(table, tsdb.layout, now_s=T0 + 7200)
    cells = table.row(ROW)
    assert cells[b"t:\x01\x00\x05"] == note
    assert cells[b"t:" + bytes.fromhex("000000A0")] == bytes.fromhex("010200")


def test_background_queue_compacts_only_rows_written_and_due(tsd_config: dict[str, object]) -> None:
    from tests.conftest import make_tsdb

    tsdb = make_tsdb({**tsd_config, "tsd.storage.compaction.background": True})
    assert tsdb.compaction_queue is not None
    write(tsdb, (T0, 1), (T0 + 10, 2), (T0 + 3600, 3), (T0 + 3610, 4))
    assert len(tsdb.compaction_queue) == 2
    stats = tsdb.compaction_queue.flush(now_s=T0 + 3600 + 1800)  # only the first hour is over
    assert (stats.rows_compacted, stats.cells_merged) == (1, 2)
    compacted = {b"t:" + bytes.fromhex("000000A0"): bytes.fromhex("010200")}
    assert tsdb.data_table().row(ROW) == compacted
    assert len(tsdb.compaction_queue) == 1
    assert tsdb.compaction_queue.flush(now_s=T0 + 7200).rows_compacted == 1
    assert len(tsdb.compaction_queue) == 0
