"""Prompt writes on the embedded store (``PromptWrites``: the server's loop storing a put):
whom they wait for, what they commit, and when they are durable. Two ``WriteLock``s on one
path hold separate ``flock``s, as two processes do."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from app.storage import sqlite_sync
from app.storage.base import WriteBusy
from app.storage.sqlite import SqliteStore
from app.storage.sqlite_write import WriteLock


def held_in_thread(lock: WriteLock, wait: bool, release: threading.Event) -> threading.Event:
    """``lock`` taken by another thread and held until ``release``; set once taken."""
    taken = threading.Event()

    def hold() -> None:
        lock.acquire(wait=wait)
        taken.set()
        release.wait(10)
        lock.release()

    threading.Thread(target=hold, daemon=True).start()
    return taken


def test_a_prompt_writer_does_not_wait_behind_a_long_writer(tmp_path: Path) -> None:
    path = str(tmp_path / "store.writelock")
    long_writer, prompt = WriteLock(path), WriteLock(path)
    long_writer.acquire()  # a merge, a line-protocol block: any writer that waits
    with pytest.raises(WriteBusy):
        prompt.acquire(wait=False)
    long_writer.release()
    prompt.acquire(wait=False)
    prompt.release()


def test_a_prompt_writer_waits_for_another_prompt_writers_short_commit(tmp_path: Path) -> None:
    path = str(tmp_path / "store.writelock")
    release = threading.Event()
    assert held_in_thread(WriteLock(path), False, release).wait(10)
    threading.Timer(0.2, release.set).start()
    started = time.monotonic()
    second = WriteLock(path)
    second.acquire(wait=False)  # waits for the first, no WriteBusy
    assert time.monotonic() - started >= 0.15
    second.release()


def test_a_prompt_writer_does_not_wait_for_another_thread_of_its_process(
        tmp_path: Path) -> None:
    lock = WriteLock(str(tmp_path / "store.writelock"))
    release = threading.Event()
    assert held_in_thread(lock, True, release).wait(10)
    with pytest.raises(WriteBusy):
        lock.acquire(wait=False)
    release.set()


def test_prompt_commits_skip_the_sync_and_one_sync_makes_them_all_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteStore(tmp_path / "store.db")  # synchronous=FULL
    synced: list[str] = []
    real_sync = os.fdatasync

    def counted_sync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_sync(fd)

    monkeypatch.setattr(sqlite_sync.os, "fdatasync", counted_sync)
    with store.prompt():
        for number in range(3):
            with store.transaction() as db:
                assert db.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
                db.execute("INSERT INTO hbase_tables (name, families) VALUES (?, '{}')",
                           (f"t{number}",))
    assert synced == []
    store.durable().result(timeout=10)
    assert synced == [str(tmp_path / "store.db-wal")]
    store.durable().result(timeout=0)  # nothing new: done at once
    assert len(synced) == 1
    with store.transaction() as db:  # outside prompt(): SQLite's own sync, as configured
        assert db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    assert store.table_names() == ["t0", "t1", "t2"]


def test_a_prompt_write_that_would_merge_staged_cells_first_leaves_it_to_a_thread(
        tmp_path: Path) -> None:
    """An append merges the table's staged cells in its transaction: long, so a prompt
    writer raises WriteBusy before writing anything."""
    store = SqliteStore(tmp_path / "store.db")
    store.create_table("tsdb", {"t": {}})
    table = store.table("tsdb")
    table.put_many([(b"row", {b"t:\x00\x00": b"\x01"})])  # small cells: staged
    with store.prompt(), pytest.raises(WriteBusy):
        table.append(b"row", b"t:\x00\x00\x00\x00", b"\x00\x10\x02")
    assert table.row(b"row") == {b"t:\x00\x00": b"\x01"}
    table.append(b"row", b"t:\x00\x00\x00\x00", b"\x00\x10\x02")  # a waiting writer merges
    assert table.row(b"row") == {b"t:\x00\x00": b"\x01", b"t:\x00\x00\x00\x00": b"\x00\x10\x02"}
