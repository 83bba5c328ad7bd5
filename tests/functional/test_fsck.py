"""pytsd fsck over both backends: each kind of damage OpenTSDB's Fsck reports is planted with
raw cells (bytes written by hand: qualifier = offset_s << 4 | flags, 1-byte integers), found,
and fixed by the flag OpenTSDB uses for it; a second run finds nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from app.tsdb import TSDB
from app.tsdb.fsck import FsckOptions, fsck
from app.tsdb.writer import DataPoint, PointWriter

T0 = 1356998400
# sys.cpu{host=a}: metric, tagk and tagv UIDs 000001; the hour row of T0.
ROW = b"\x00\x00\x01" + T0.to_bytes(4, "big") + b"\x00\x00\x01\x00\x00\x01"


def q(offset_s: int) -> bytes:
    return (offset_s << 4).to_bytes(2, "big")


def setup(tsdb: TSDB) -> None:
    assert PointWriter(tsdb).write([DataPoint("sys.cpu", T0 + 3600, 1, {"host": "a"})]) == [None]


def test_a_clean_store_has_no_errors(tsdb: TSDB) -> None:
    setup(tsdb)
    report = fsck(tsdb, FsckOptions())
    assert (report.rows, report.cells, report.valid_datapoints, report.errors) == (1, 1, 1, 0)


def test_duplicates_keep_the_oldest_write(tsdb: TSDB) -> None:
    setup(tsdb)
    table = tsdb.data_table()
    table.put(ROW, {b"t:" + q(10): b"\x07"})  # the first write of T0+10
    time.sleep(0.01)
    # A later compacted column holding T0+10 again (value 8) and T0+20.
    table.put(ROW, {b"t:" + q(10) + q(20): b"\x08\x09\x00"})
    report = fsck(tsdb, FsckOptions())
    assert (report.duplicates, report.valid_datapoints, report.errors) == (1, 3, 1)
    fixed = fsck(tsdb, FsckOptions(fix=True, resolve_duplicates=True))
    assert (fixed.duplicates_fixed, fixed.rows_rewritten) == (1, 1)
    assert table.row(ROW) == {b"t:" + q(10) + q(20): b"\x07\x09\x00"}
    assert fsck(tsdb, FsckOptions()).errors == 0


def test_last_write_wins(tsdb: TSDB) -> None:
    setup(tsdb)
    table = tsdb.data_table()
    table.put(ROW, {b"t:" + q(10): b"\x07"})
    time.sleep(0.01)
    table.put(ROW, {b"t:" + q(10) + q(20): b"\x08\x09\x00"})
    fsck(tsdb, FsckOptions(fix=True, resolve_duplicates=True, last_write_wins=True))
    assert table.row(ROW) == {b"t:" + q(10) + q(20): b"\x08\x09\x00"}


def test_duplicates_without_resolving_are_left_alone(tsdb: TSDB) -> None:
    setup(tsdb)
    table = tsdb.data_table()
    # T0+10 twice: a second qualifier and a millisecond one (0xF0000000 | 10000 << 6).
    table.put(ROW, {b"t:" + q(10): b"\x07", b"t:\xf0\x09\xc4\x00": b"\x08"})
    before = table.row(ROW)
    report = fsck(tsdb, FsckOptions(fix=True, compact=True))
    # Only the other (clean) hour row is rewritten by --compact.
    assert (report.duplicates, report.duplicates_fixed, report.rows_rewritten) == (1, 0, 1)
    assert table.row(ROW) == before


def test_out_of_order_compacted_column_is_rewritten(tsdb: TSDB) -> None:
    setup(tsdb)
    table = tsdb.data_table()
    table.put(ROW, {b"t:" + q(20) + q(10): b"\x02\x01\x00"})
    report = fsck(tsdb, FsckOptions())
    assert (report.fixable_compacted_columns, report.errors) == (1, 1)
    fsck(tsdb, FsckOptions(fix=True))
    assert table.row(ROW) == {b"t:" + q(10) + q(20): b"\x01\x02\x00"}
    assert fsck(tsdb, FsckOptions()).errors == 0


def test_bad_keys_orphans_unknown_columns_and_bad_compactions(tsdb: TSDB) -> None:
    setup(tsdb)
    table = tsdb.data_table()
    orphan = b"\x00\x00\x09" + ROW[3:]  # metric 000009 has no name
    short = ROW[:9]
    table.put(orphan, {b"t:" + q(1): b"\x01"})
    table.put(short, {b"t:" + q(1): b"\x01"})
    table.put(ROW, {b"t:\x01\x02\x03\x04\x05\x06\x07": b"junk",
                    b"t:" + q(1) + q(2): b"\x01\x02\x07"})  # last byte must be 0 or 1
    report = fsck(tsdb, FsckOptions())
    assert (report.orphans, report.bad_key, report.unknown, report.bad_compacted_columns) == (
        1, 1, 1, 1)
    assert report.errors == 4
    fixed = fsck(tsdb, FsckOptions.fix_all())
    assert (fixed.orphans_fixed, fixed.bad_key_fixed, fixed.unknown_fixed) == (1, 1, 1)
    assert table.row(orphan) == {} and table.row(short) == {}
    # The unreadable compaction stays: OpenTSDB cannot repair it either.
    assert table.row(ROW) == {b"t:" + q(1) + q(2): b"\x01\x02\x07"}
    assert fsck(tsdb, FsckOptions()).errors == 1


def test_cli(tmp_path: Path) -> None:
    env = {"TSD_STORAGE": f"sqlite:///{tmp_path / 'cli.db'}", "TSD_CONFIG": "",
           "TSD_CORE_AUTO_CREATE_METRICS": "true"}
    runner = CliRunner()
    source = tmp_path / "points.txt"
    source.write_text(f"sys.cpu {T0 + 3600} 1 host=a\n")
    assert runner.invoke(main, ["import", "--no-progress", str(source)], env=env).exit_code == 0
    clean = runner.invoke(main, ["fsck", "--full-scan"], env=env)
    assert clean.exit_code == 0, clean.output
    assert "Total Errors: 0" in clean.output and "Rows Processed: 1" in clean.output
    from app.config import load_config

    tsdb = TSDB(load_config({"tsd.storage": env["TSD_STORAGE"]}, environ={}))
    tsdb.data_table().put(ROW, {b"t:" + q(20) + q(10): b"\x02\x01\x00"})
    tsdb.close()
    found = runner.invoke(main, ["fsck"], env=env)
    assert found.exit_code == 1
    assert "Compacted column was out of order" in found.output
    fixing = runner.invoke(main, ["fsck", "--fix"], env=env)
    assert fixing.exit_code == 1  # errors were found (and fixed): OpenTSDB's exit code too
    assert runner.invoke(main, ["fsck"], env=env).exit_code == 0
    tsdb = TSDB(load_config({"tsd.storage": env["TSD_STORAGE"]}, environ={}))
    tsdb.data_table().put(ROW, {b"t:" + qf(30, F8): ONE_AND_HALF})  # 4 bytes, flagged 8
    tsdb.close()
    kept = runner.invoke(main, ["fsck", "--fix"], env=env)
    assert "Unparseable Datapoint Values: 1" in kept.output
    assert "Unparseable Datapoint Values Deleted: 0" in kept.output
    deleted = runner.invoke(main, ["fsck", "--fix", "--delete-bad-values"], env=env)
    assert "Unparseable Datapoint Values Deleted: 1" in deleted.output, deleted.output
    assert runner.invoke(main, ["fsck"], env=env).exit_code == 0


def test_progress_and_resume(tsdb: TSDB, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.tsdb import fsck as fsck_module

    setup(tsdb)
    tsdb.data_table().put(ROW, {b"t:" + q(20) + q(10): b"\x02\x01\x00"})  # damage in ROW
    monkeypatch.setattr(fsck_module, "PROGRESS_ROWS", 1)
    seen: list[tuple[int, bytes]] = []
    report = fsck(tsdb, FsckOptions(), lambda rows, last: seen.append((rows, last)))
    assert report.errors == 1
    assert [last for _, last in seen] == [ROW, ROW[:3] + (T0 + 3600).to_bytes(4, "big")
                                          + ROW[7:]]
    # Resuming after ROW (the progress line's key plus one byte) skips it.
    resumed = fsck(tsdb, FsckOptions(), start_row=ROW + b"\x00")
    assert (resumed.rows, resumed.errors) == (1, 0)


F4 = 0x0B  # float flag, 4-byte length
F8 = 0x0F  # float flag, 8-byte length
ONE_AND_HALF = b"\x3f\xc0\x00\x00"  # 1.5f


def qf(offset_s: int, flags: int) -> bytes:
    return ((offset_s << 4) | flags).to_bytes(2, "big")


# (damage planted in ROW, what the first fsck counts, the row after `--fix-all`)
VALUE_DAMAGE = {
    "float stored on 8 bytes, flagged 4": (
        {qf(5, F4): b"\x00" * 4 + ONE_AND_HALF}, {"value_encoding": 1},
        {qf(5, F4): ONE_AND_HALF}),
    "float sign-extended to 8 bytes": (
        {qf(5, F4): b"\xff" * 4 + b"\xc0\x20\x00\x00"}, {"value_encoding": 1},
        {qf(5, F4): b"\xc0\x20\x00\x00"}),
    "float on 8 bytes, flagged 4, with a non-zero high half": (
        {qf(5, F4): b"\x00\x00\x01\x00" + ONE_AND_HALF, q(6): b"\x02"}, {"bad_values": 1},
        {q(6): b"\x02"}),
    "float flagged 8 bytes, stored on 4": (
        {qf(5, F8): ONE_AND_HALF, q(6): b"\x02"}, {"bad_values": 1}, {q(6): b"\x02"}),
    "float on 3 bytes": ({qf(5, F4): b"\x01\x02\x03", q(6): b"\x02"}, {"bad_values": 1},
                         {q(6): b"\x02"}),
    "integer flagged 2 bytes, stored on 1": (
        {qf(5, 0x1): b"\x07", q(6): b"\x02"}, {"bad_values": 1}, {q(6): b"\x02"}),
}


@pytest.mark.parametrize("kind", list(VALUE_DAMAGE))
def test_bad_values_are_found_and_fixed(tsdb: TSDB, kind: str) -> None:
    setup(tsdb)
    planted, counts, after = VALUE_DAMAGE[kind]
    table = tsdb.data_table()
    table.put(ROW, {b"t:" + k: v for k, v in planted.items()})
    report = fsck(tsdb, FsckOptions())
    assert {name: getattr(report, name) for name in counts} == counts
    assert report.errors == sum(counts.values())
    assert table.row(ROW) == {b"t:" + k: v for k, v in planted.items()}  # only looked
    fixed = fsck(tsdb, FsckOptions(fix=True, delete_bad_values=True))
    assert fixed.value_encoding_fixed + fixed.bad_values_deleted == 1
    assert table.row(ROW) == {b"t:" + k: v for k, v in after.items()}
    assert fsck(tsdb, FsckOptions()).errors == 0


def test_bad_values_stay_without_delete_bad_values(tsdb: TSDB) -> None:
    setup(tsdb)
    table = tsdb.data_table()
    table.put(ROW, {b"t:" + qf(5, F8): ONE_AND_HALF})
    assert fsck(tsdb, FsckOptions(fix=True)).bad_values_deleted == 0
    assert table.row(ROW) == {b"t:" + qf(5, F8): ONE_AND_HALF}


def test_eight_byte_integers_are_re_encoded_but_no_error(tsdb: TSDB) -> None:
    setup(tsdb)
    table = tsdb.data_table()
    table.put(ROW, {b"t:" + qf(5, 0x7): (300).to_bytes(8, "big"),
                    b"t:" + qf(7, 0x7): (-2).to_bytes(8, "big", signed=True)})
    report = fsck(tsdb, FsckOptions())
    assert (report.vle, report.vle_bytes, report.errors) == (2, 6 + 7, 0)
    fixed = fsck(tsdb, FsckOptions(fix=True))
    assert fixed.vle_fixed == 2
    assert table.row(ROW) == {b"t:" + qf(5, 0x1): b"\x01\x2c", b"t:" + qf(7, 0x0): b"\xfe"}
    # in a compacted column, the row is rewritten with the short values
    later = ROW[:3] + (T0 + 7200).to_bytes(4, "big") + ROW[7:]
    table.put(later, {b"t:" + qf(5, 0x7) + q(6): (300).to_bytes(8, "big") + b"\x02\x00"})
    assert fsck(tsdb, FsckOptions(fix=True)).vle_fixed == 1
    assert table.row(later) == {b"t:" + qf(5, 0x1) + q(6): b"\x01\x2c\x02\x00"}


def test_odd_qualifiers_of_another_kind_are_future_objects(tsdb: TSDB) -> None:
    setup(tsdb)
    table = tsdb.data_table()
    table.put(ROW, {b"t:\x03\x00\x10": b"\x01", b"t:" + q(1): b"\x01"})
    report = fsck(tsdb, FsckOptions.fix_all())
    assert (report.future, report.unknown, report.errors) == (1, 0, 0)
    assert b"t:\x03\x00\x10" in table.row(ROW)  # left alone, as OpenTSDB leaves it
