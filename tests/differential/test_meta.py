"""Meta data and trees against OpenTSDB 2.4.1's own tools (``UidManager metasync|treesync``,
``Fsck``), run over pytsd's tables through scripts/opentsdb/opentsdb.sh ``tool``: no TSD is
started. OpenTSDB edits a TSMeta or UIDMeta with a compare-and-set against its re-serialisation
of the stored cell, so its metasync changing a pytsd cell proves the bytes are its own.

Gated like the rest of the tier (``TSD_TEST_OPENTSDB``); needs ``TSD_TEST_HBASE`` too.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest

from app.meta.tree_codec import TreeRule
from app.meta.trees import create_tree, delete_tree, sync_rule
from app.tsdb import TSDB
from app.tsdb.writer import DataPoint, PointWriter
from tests.conftest import make_tsdb
from tests.differential.oracle import OpenTSDB

pytestmark = pytest.mark.skipif(
    not (os.environ.get("TSD_TEST_OPENTSDB") and os.environ.get("TSD_TEST_HBASE")),
    reason="the differential tier needs TSD_TEST_OPENTSDB and TSD_TEST_HBASE")
META = {"tsd.core.meta.enable_tsuid_tracking": "true", "tsd.core.meta.enable_realtime_ts": "true",
        "tsd.core.meta.enable_tsuid_incrementing": "true",
        "tsd.core.meta.enable_realtime_uid": "true", "tsd.core.tree.enable_processing": "true",
        "tsd.storage.enable_compaction": "false"}
HOUR_S = 3600


@pytest.fixture
def tables() -> Iterator[tuple[TSDB, OpenTSDB]]:
    prefix = f"meta{uuid.uuid4().hex[:8]}_"
    settings = {**META, "tsd.core.meta.counter_flush_ms": "0"}
    tsdb = make_tsdb({"tsd.storage": f"hbase://{os.environ['TSD_TEST_HBASE']}",
                      "tsd.storage.hbase.table_prefix": prefix,
                      "tsd.core.auto_create_metrics": True, **settings})
    tools = OpenTSDB("meta-tools", prefix, os.environ["TSD_TEST_HBASE"], META)
    yield tsdb, tools
    drop = getattr(tsdb.store, "drop_tables", None)
    if drop is not None:
        drop()
    tsdb.close()


def cells(tsdb: TSDB, table: str, suffix: str = "") -> dict[tuple[bytes, bytes], bytes]:
    return {(row, column): value for row, row_cells in tsdb.store.table(table).scan()
            for column, value in row_cells.items() if column.endswith(suffix.encode())}


def write(tsdb: TSDB, start_s: int) -> None:
    points = [DataPoint(metric, start_s + i * 60, i, {"host": host})
              for metric in ("sys.cpu.user", "sys.mem.free") for host in ("web01", "web02")
              for i in range(3)]
    assert not any(PointWriter(tsdb).write(points))


def test_opentsdb_metasync_edits_pytsd_meta_in_place(tables: tuple[TSDB, OpenTSDB]) -> None:
    tsdb, tools = tables
    first_hour = int(time.time()) // HOUR_S * HOUR_S - 2 * HOUR_S
    write(tsdb, first_hour)  # tracked: TSMeta and UIDMeta created now, two hours after the data
    before = {**cells(tsdb, tsdb.meta_table_name), **cells(tsdb, tsdb.uid_table_name, "_meta")}
    assert len(before) == 8 + 5
    tools.tool("net.opentsdb.tools.UidManager", "metasync")
    after = {**cells(tsdb, tsdb.meta_table_name), **cells(tsdb, tsdb.uid_table_name, "_meta")}
    # MetaSync moves each `created` to the data's first hour through a compare-and-set against
    # its own serialisation of the stored cell: every pytsd cell matched it byte for byte.
    for key, value in before.items():
        if key[1].endswith((b"ts_meta", b"_meta")):
            created = str(first_hour).encode()
            old = value.split(b'"created":')[1].split(b",")[0]
            assert after[key] == value.replace(b'"created":' + old, b'"created":' + created)
        else:
            assert after[key] == value  # the counters
    assert tools.fsck_errors() == 0


def test_opentsdb_treesync_builds_pytsds_branches(tables: tuple[TSDB, OpenTSDB]) -> None:
    tsdb, tools = tables
    create_tree(tsdb, {"name": "metrics", "enabled": True}, 1356998400)
    sync_rule(tsdb, TreeRule(tree_id=1, type="METRIC", separator="\\."), {"type", "separator"},
              False)
    sync_rule(tsdb, TreeRule(tree_id=1, level=1, type="TAGK", field="host"), {"type", "field"},
              False)
    write(tsdb, 1356998400)
    built_by_pytsd = cells(tsdb, tsdb.tree_table_name)
    delete_tree(tsdb, 1, False)
    tools.tool("net.opentsdb.tools.UidManager", "treesync")
    assert cells(tsdb, tsdb.tree_table_name) == built_by_pytsd


F4, F8 = 0x0B, 0x0F  # float flags: 4-byte, 8-byte value
ONE_AND_HALF = b"\x3f\xc0\x00\x00"


def _q(offset_s: int, flags: int = 0) -> bytes:
    return ((offset_s << 4) | flags).to_bytes(2, "big")


def _row(hour: int, metric: bytes = b"\x00\x00\x01") -> bytes:
    """sys.cpu.user{host=web01}'s row ``hour`` hours after 2013-01-01."""
    return metric + (1356998400 + hour * HOUR_S).to_bytes(4, "big") + b"\x00\x00\x01\x00\x00\x01"


# Every kind of damage OpenTSDB's Fsck finds and can fix, one row each (hour 0 holds data).
DAMAGE: dict[bytes, dict[bytes, bytes]] = {
    _row(0, b"\x00\x00\x09"): {_q(10): b"\x01"},  # an orphan: metric 000009 has no name
    _row(0)[:9]: {_q(1): b"\x01"},  # a row key too short
    _row(1): {_q(1) + _q(2): b"\x01\x02\x03\x00"},  # a compaction that does not decode
    _row(2): {_q(5, F4): b"\x00" * 4 + ONE_AND_HALF},  # a float on 8 bytes, flagged 4
    _row(3): {_q(5, F4): b"\xff" * 4 + ONE_AND_HALF},  # ... sign-extended
    _row(4): {_q(5, F4): b"\x00\x01\x00\x00" + ONE_AND_HALF, _q(6): b"\x02"},  # unreadable
    _row(5): {_q(5, F8): ONE_AND_HALF, _q(6): b"\x02"},  # flagged 8 bytes, stored on 4
    _row(6): {_q(5, 0x1): b"\x07", _q(6): b"\x02"},  # an integer flagged 2 bytes, on 1
    _row(7): {_q(5, 0x7): (300).to_bytes(8, "big")},  # 8 bytes for 2 (VLE: not an error)
}


def test_pytsd_fsck_fixes_each_kind_of_damage_and_opentsdbs_agrees(
        tables: tuple[TSDB, OpenTSDB]) -> None:
    from app.tsdb.fsck import FsckOptions, fsck

    tsdb, tools = tables
    write(tsdb, 1356998400)
    row = _row(0)
    table = tsdb.data_table()
    q = _q(10)
    table.put(row, {b"t:" + q: b"\x07"})  # a duplicate of the point at +10 s (below)
    time.sleep(0.01)
    table.put(row, {b"t:" + q + _q(5): b"\x08\x09\x00"})  # out of order
    table.put(row, {b"t:\x01\x02\x03\x04\x05\x06\x07": b"junk"})  # an unknown column
    for key, cells in DAMAGE.items():
        table.put(key, {b"t:" + column: value for column, value in cells.items()})
    found = fsck(tsdb, FsckOptions())
    assert (found.duplicates, found.fixable_compacted_columns, found.orphans, found.unknown,
            found.bad_key, found.bad_compacted_columns, found.value_encoding, found.bad_values,
            found.vle) == (1, 1, 1, 1, 1, 1, 2, 3, 1)
    # OpenTSDB sees damage too (its own count is no reference: its four scanner threads
    # overlap and report the same row several times).
    assert tools.fsck_errors() > 0
    fixed = fsck(tsdb, FsckOptions.fix_all())
    assert (fixed.value_encoding_fixed, fixed.bad_values_deleted, fixed.vle_fixed) == (2, 3, 1)
    assert fsck(tsdb, FsckOptions()).errors == 0
    assert tools.fsck_errors() == 0
    assert table.row(_row(3)) == {b"t:" + _q(5, F4): ONE_AND_HALF}
    assert table.row(_row(7)) == {b"t:" + _q(5, 0x1): b"\x01\x2c"}
