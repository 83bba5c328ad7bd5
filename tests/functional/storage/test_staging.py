"""The embedded store's staging table: ``put_many`` stages cells, reads and other writes merge
them first, so every operation sees exactly what it would without staging."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from app.errors import StorageError
from app.storage import sqlite_write
from app.storage.sqlite import SqliteStore, SqliteTable, now_ms

ROOT = Path(__file__).resolve().parents[3]


def staged(path: Path) -> list[tuple[str, bytes, str, bytes, bytes]]:
    """What the staging table holds, read past the store (no merge)."""
    with sqlite3.connect(path) as db:
        records, _ = sqlite_write.staged_records(db)
        return [record[:5] for record in records]


def staged_batches(path: Path) -> int:
    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT count(*) FROM staged_batches").fetchone()[0])


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "s.db"


@pytest.fixture
def table(path: Path) -> SqliteTable:
    store = SqliteStore(path)
    store.create_table("tsdb", {"t": {}})
    store.create_table("tsdb-uid", {"id": {}, "name": {}})
    return store.table("tsdb")


def test_put_many_stages_and_every_read_sees_the_staged_cells(path: Path,
                                                                table: SqliteTable) -> None:
    table.put_many([(b"r1", {b"t:\x00\x00": b"a"}), (b"r2", {b"t:\x00\x10": b"b"})])
    assert len(staged(path)) == 2
    other = SqliteStore(path).table("tsdb")  # another connection, as another worker has
    reads = [
        lambda: other.row(b"r1") == {b"t:\x00\x00": b"a"},
        lambda: list(other.scan()) == [(b"r1", {b"t:\x00\x00": b"a"}),
                                       (b"r2", {b"t:\x00\x10": b"b"})],
        lambda: other.rows([b"r2", b"r1"]) == [(b"r2", {b"t:\x00\x10": b"b"}),
                                               (b"r1", {b"t:\x00\x00": b"a"})],
        lambda: set(other.row_write_times(b"r2")) == {b"t:\x00\x10"},
        lambda: [(row, cells) for row, cells, _ in other.scan_stamps(b"", None, "t")]
        == [(b"r1", 1), (b"r2", 1)],
    ]
    for number, read in enumerate(reads):
        table.put_many([(b"r1", {b"t:\x00\x00": b"a"})])  # staged again before each read
        assert staged(path) != []
        assert read(), f"read {number}"
        assert staged(path) == []


def test_reads_of_another_table_leave_the_staged_cells_staged(path: Path,
                                                                table: SqliteTable) -> None:
    table.put_many([(b"r", {b"t:\x00\x00": b"a"})])
    assert table.store.table("tsdb-uid").row(b"r") == {}
    assert len(staged(path)) == 1


def test_a_read_in_another_process_sees_staged_cells(path: Path, table: SqliteTable) -> None:
    table.put_many([(b"r", {b"t:\x00\x00": b"from the writer"})])
    script = textwrap.dedent(f"""
        from app.storage.sqlite import SqliteStore
        print(SqliteStore({str(path)!r}).table("tsdb").row(b"r")[b"t:\\x00\\x00"].decode())
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout.strip() == "from the writer"
    assert staged(path) == []


def test_a_cell_staged_twice_keeps_the_newer(table: SqliteTable) -> None:
    table.put_many([(b"r", {b"t:\x00\x00": b"old", b"t:\x00\x10": b"kept"})])
    first_ms = now_ms()
    time.sleep(0.003)
    table.put_many([(b"r", {b"t:\x00\x00": b"new"})])
    assert table.row(b"r") == {b"t:\x00\x00": b"new", b"t:\x00\x10": b"kept"}
    times = table.row_write_times(b"r")
    assert times[b"t:\x00\x00"] > first_ms >= times[b"t:\x00\x10"]


def test_a_staged_cell_replaces_a_merged_one(table: SqliteTable) -> None:
    table.put_many([(b"r", {b"t:\x00\x00": b"old"})])
    assert table.row(b"r") == {b"t:\x00\x00": b"old"}  # merged
    table.put_many([(b"r", {b"t:\x00\x00": b"new"})])  # staged
    assert table.row(b"r") == {b"t:\x00\x00": b"new"}


def test_each_cell_keeps_the_time_it_was_staged_at(path: Path, table: SqliteTable) -> None:
    before_ms = now_ms()
    table.put_many([(b"r", {b"t:\x00\x00": b"a"})])
    after_ms = now_ms()
    time.sleep(0.05)  # the merge below comes well after the write
    assert before_ms <= table.row_write_times(b"r")[b"t:\x00\x00"] <= after_ms
    assert staged(path) == []


def test_deleting_staged_cells(table: SqliteTable) -> None:
    table.put_many([(b"r", {b"t:\x00\x00": b"a", b"t:\x00\x10": b"b"}),
                    (b"s", {b"t:\x00\x00": b"c"})])
    table.delete(b"r", [b"t:\x00\x00"])
    table.delete(b"s")
    assert list(table.scan()) == [(b"r", {b"t:\x00\x10": b"b"})]


def test_a_delete_up_to_a_time_removes_staged_cells_written_before_it(
        table: SqliteTable) -> None:
    table.put_many([(b"r", {b"t:\x00\x00": b"a", b"t:\x00\x10": b"b"})])
    up_to_ms = now_ms()
    time.sleep(0.003)
    table.put_many([(b"r", {b"t:\x00\x10": b"later"})])  # both still staged
    table.delete(b"r", [b"t:\x00\x00", b"t:\x00\x10"], up_to_ms=up_to_ms)
    assert table.row(b"r") == {b"t:\x00\x10": b"later"}


def test_read_modify_writes_see_staged_cells(table: SqliteTable) -> None:
    uid = table.store.table("tsdb-uid")
    uid.put_many([(b"\x00", {b"id:metrics": (41).to_bytes(8, "big")}),
                  (b"name", {b"id:metrics": b"\x00\x00\x07"})])
    assert uid.counter_inc(b"\x00", b"id:metrics") == 42
    assert not uid.check_and_put(b"name", b"id:metrics", None, b"\x00\x00\x08")
    assert uid.check_and_put(b"name", b"id:metrics", b"\x00\x00\x07", b"\x00\x00\x09")
    table.put_many([(b"r", {b"t:\x05\x00\x00": b"\x00\x00\x01"})])
    table.append(b"r", b"t:\x05\x00\x00", b"\x00\x10\x02")
    assert table.row(b"r") == {b"t:\x05\x00\x00": b"\x00\x00\x01\x00\x10\x02"}
    assert uid.row(b"name") == {b"id:metrics": b"\x00\x00\x09"}


def test_writes_past_the_bound_merge_without_a_read(path: Path, table: SqliteTable,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_write, "STAGE_MAX_CELLS", 10)
    table.put_many([(f"r{n}".encode(), {b"t:\x00\x00": b"x"}) for n in range(9)])
    assert len(staged(path)) == 9
    table.put_many([(b"r9", {b"t:\x00\x00": b"x"})])
    assert staged(path) == []
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM cells WHERE tbl = 'tsdb'").fetchone() == (10,)


def test_writes_past_the_byte_bound_merge(path: Path, table: SqliteTable,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_write, "STAGE_MAX_BYTES", 1000)
    table.put_many([(f"r{n}".encode(), {b"t:\x00\x00": b"x" * 100}) for n in range(9)])
    assert len(staged(path)) == 9
    table.put_many([(b"s", {b"t:\x00\x00": b"x" * 100})])
    assert staged(path) == []


def test_batches_of_big_cells_go_straight_to_cells_after_older_staged_ones(
        path: Path, table: SqliteTable) -> None:
    big = b"x" * sqlite_write.DIRECT_MIN_BYTES_PER_CELL
    table.put_many([(b"r", {b"t:\x00\x00": b"small, older", b"t:\x00\x10": b"kept"})])
    assert len(staged(path)) == 2
    table.put_many([(b"r", {b"t:\x00\x00": big})])  # a compacted cell, say
    assert staged(path) == []  # the older cells were merged first, in the same transaction
    assert table.row(b"r") == {b"t:\x00\x00": big, b"t:\x00\x10": b"kept"}
    table.put_many([(b"r", {b"t:\x00\x00": b"small, newest"})])
    assert table.row(b"r")[b"t:\x00\x00"] == b"small, newest"


def test_a_failed_bound_merge_fails_no_acknowledged_write(
        path: Path, table: SqliteTable, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(db: sqlite3.Connection, name: str | None = None, pack: bool = False) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(sqlite_write, "STAGE_MAX_CELLS", 1)
    with monkeypatch.context() as patched:
        patched.setattr(sqlite_write, "merge_staged", broken)
        table.put_many([(b"r", {b"t:\x00\x00": b"kept"})])  # committed: no error raised
    assert "merging the staged cells" in caplog.text
    assert len(staged(path)) == 1
    assert table.row(b"r") == {b"t:\x00\x00": b"kept"}  # the read merges it


WRITER = """
import os, signal, sys
from app.storage.sqlite import SqliteStore
table = SqliteStore(sys.argv[1], synchronous=sys.argv[2]).table("tsdb")
for n in range(50):
    table.put_many([(b"r%03d" % n, {b"t:\\x00\\x00": b"v%d" % k}) for k in range(20)])
print("written", flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # no close, no merge, no clean exit
"""


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_a_writer_killed_before_the_merge_loses_nothing(path: Path, table: SqliteTable,
                                                          synchronous: str) -> None:
    done = subprocess.run([sys.executable, "-c", WRITER, str(path), synchronous], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL and done.stdout == "written\n", done.stderr
    assert (b"r049", b"v19") in {(row, value) for _, row, _, _, value in staged(path)}
    reopened = SqliteStore(path).table("tsdb")
    rows = list(reopened.scan())
    assert rows == [(b"r%03d" % n, {b"t:\x00\x00": b"v19"}) for n in range(50)]


def test_a_new_store_takes_the_page_size_and_an_existing_one_keeps_its_own(
        tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    SqliteStore(path, page_size=16384).create_table("t", {"f": {}})
    SqliteStore(path, page_size=4096).table("t").put_many([(b"r", {b"f:q": b"v"})])
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA page_size").fetchone() == (16384,)


def test_a_batch_is_staged_as_one_row_and_unpacks_to_its_cells(path: Path,
                                                               table: SqliteTable) -> None:
    puts = [(b"r1", {b"t:\x00\x00": b"a", b"t:\x00\x10": b""}), (b"", {b"t:\x01": b"\xff" * 9})]
    table.put_many(puts)
    assert staged_batches(path) == 1
    assert staged(path) == [("tsdb", b"r1", "t", b"\x00\x00", b"a"),
                            ("tsdb", b"r1", "t", b"\x00\x10", b""),
                            ("tsdb", b"", "t", b"\x01", b"\xff" * 9)]
    cells, blob = sqlite_write.pack_cells(puts)
    assert sqlite_write.unpack_cells(cells, blob) == (
        [b"r1", b"r1", b""], [b"t:\x00\x00", b"t:\x00\x10", b"t:\x01"], [b"a", b"", b"\xff" * 9])


def test_other_families_are_staged_and_merged_too(table: SqliteTable) -> None:
    uid = table.store.table("tsdb-uid")
    uid.put_many([(b"\x00\x01", {b"name:metrics": b"sys.cpu", b"id:tagk": b"\x00\x02"})])
    assert uid.row(b"\x00\x01") == {b"name:metrics": b"sys.cpu", b"id:tagk": b"\x00\x02"}


def test_a_column_without_qualifier_is_refused_before_anything_is_staged(
        path: Path, table: SqliteTable) -> None:
    with pytest.raises(StorageError, match="family:qualifier"):
        table.put_many([(b"r", {b"t:\x00\x00": b"a"}), (b"s", {b"t": b"b"})])
    assert staged(path) == []


def test_a_merge_in_chunks_keeps_the_latest_of_each_cell(path: Path, table: SqliteTable,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_write, "MERGE_CHUNK_CELLS", 3)
    for n in range(7):  # each batch rewrites r/0000 and adds a cell of its own
        table.put_many([(b"r", {b"t:\x00\x00": b"v%d" % n, b"t:\x00%c" % (16 + n): b"x"})])
    assert staged_batches(path) == 7
    assert table.row(b"r")[b"t:\x00\x00"] == b"v6"
    assert len(table.row(b"r")) == 8
    assert staged_batches(path) == 0


def test_a_merge_of_many_statements_keeps_the_latest_of_each_cell(path: Path,
                                                                  table: SqliteTable) -> None:
    # 1,100 batches of 2 cells: a cell rewritten by every batch spans several statements of
    # ROWS_PER_INSERT rows and the single-row tail; the last write must win in each.
    assert 2200 % sqlite_write.ROWS_PER_INSERT and sqlite_write.ROWS_PER_INSERT < 1100
    for n in range(1100):
        own = b"t:" + (16 * (n + 1)).to_bytes(2, "big")
        table.put_many([(b"r", {b"t:\x00\x00": b"v%d" % n, own: b"%d" % n})])
    row = table.row(b"r")
    assert row[b"t:\x00\x00"] == b"v1099"
    assert len(row) == 1101
    assert row[b"t:" + (16 * 1100).to_bytes(2, "big")] == b"1099"
    assert staged_batches(path) == 0


def test_cells_an_older_pytsd_staged_one_row_each_are_merged_on_open(path: Path) -> None:
    SqliteStore(path).create_table("tsdb", {"t": {}})
    with sqlite3.connect(path) as db:  # the staging table as pytsd wrote it before
        db.executescript("""
            CREATE TABLE staged (seq INTEGER PRIMARY KEY, tbl TEXT NOT NULL, row BLOB NOT NULL,
                family TEXT NOT NULL, qualifier BLOB NOT NULL, value BLOB NOT NULL,
                ts INTEGER NOT NULL);
            INSERT INTO staged (tbl, row, family, qualifier, value, ts) VALUES
                ('tsdb', x'01', 't', x'0000', x'0a', 5), ('tsdb', x'01', 't', x'0000', x'0b', 6);
        """)
    assert SqliteStore(path).table("tsdb").row(b"\x01") == {b"t:\x00\x00": b"\x0b"}
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT name FROM sqlite_master WHERE name = 'staged'").fetchall() == []
