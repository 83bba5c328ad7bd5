"""Concurrent writers of one process share SQLite transactions (GroupCommit): every write is
committed before its call returns, and a failure reaches every writer of its group."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from app.storage.sqlite import SqliteStore, WriteLock

WRITERS, PUTS = 8, 40


def test_concurrent_put_many_all_committed(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db", synchronous="FULL")
    store.create_table("t", {"f": {}})
    table = store.table("t")
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            for n in range(PUTS):
                table.put_many([(f"w{writer}-{n}-{k}".encode(), {b"f:q": bytes([k])})
                                for k in range(5)])
                # Committed before put_many returned: another connection sees it at once.
                assert SqliteStore(tmp_path / "s.db").table("t").row(
                    f"w{writer}-{n}-4".encode()) == {b"f:q": b"\x04"}
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sum(1 for _ in table.scan()) == WRITERS * PUTS * 5


def test_a_failed_transaction_fails_its_writer(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.create_table("t", {"f": {}})
    table = store.table("t")
    with sqlite3.connect(tmp_path / "s.db") as db:  # the transaction fails inside SQLite
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON staged_batches "
                   "BEGIN SELECT RAISE(ABORT, 'refused'); END")
    with pytest.raises(sqlite3.IntegrityError, match="refused"):
        table.put_many([(b"row", {b"f:q": b"v"})])
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute("DROP TRIGGER refuse")
    table.put_many([(b"row", {b"f:q": b"v"})])  # rolled back, and the group is free again
    assert table.row(b"row") == {b"f:q": b"v"}


def test_a_batch_is_stamped_when_it_commits_not_when_it_waits(tmp_path: Path) -> None:
    """Write times grow in commit order across processes (the hour cache's range stamps rely
    on it): a batch that waited for another process's write lock is stamped after the wait."""
    path = tmp_path / "s.db"
    store = SqliteStore(path)
    store.create_table("t", {"f": {}})
    table = store.table("t")
    table.put_many([(b"warm-up", {b"f:q": b"v"})])  # the write connection, opened beforehand
    other = SqliteStore(path)  # its own lock file handle: another writer, as another process
    writer = threading.Thread(target=table.put_many, args=([(b"row", {b"f:q": b"v"})],))
    with other.transaction():
        writer.start()
        time.sleep(0.3)  # the batch is queued and waits for the lock meanwhile
        released_ms = time.time_ns() // 1_000_000
    writer.join()
    assert table.row(b"row") == {b"f:q": b"v"}  # read: merged into cells
    with sqlite3.connect(path) as db:
        (written_ms,), = db.execute("SELECT ts FROM cells WHERE row = ?", (b"row",))
    assert written_ms >= released_ms


def _write_rows(path: str, name: str, count: int) -> None:
    table = SqliteStore(path).table("t")
    for n in range(count):
        table.put_many([(f"{name}-{n}".encode(), {b"f:q": b"x"})])
        table.counter_inc(b"counter", b"f:n")  # a read-modify-write under the same lock


def test_writer_processes_take_turns(tmp_path: Path) -> None:
    """Writers in several processes (gunicorn's workers) are serialised by the write lock:
    every put lands and no read-modify-write loses an increment."""
    path = str(tmp_path / "s.db")
    SqliteStore(path).create_table("t", {"f": {}})
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_write_rows, args=(path, f"p{i}", 60)) for i in range(3)]
    for worker in workers:
        worker.start()
    _write_rows(path, "main", 60)
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    table = SqliteStore(path).table("t")
    assert sum(1 for _ in table.scan()) == 4 * 60 + 1
    assert table.counter_inc(b"counter", b"f:n", 0) == 4 * 60
    assert Path(path + ".writelock").exists()


def test_the_write_lock_is_reentrant_in_a_thread_and_exclusive_across_threads(
        tmp_path: Path) -> None:
    lock = WriteLock(str(tmp_path / "x.writelock"))
    order: list[str] = []
    with lock:
        with lock:  # re-entered by its holder
            other = threading.Thread(target=lambda: (lock.__enter__(), order.append("other"),
                                                     lock.__exit__()))
            other.start()
            other.join(0.2)
            order.append("holder")
    other.join(5)
    assert order == ["holder", "other"]
