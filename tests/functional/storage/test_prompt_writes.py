"""Prompt writes on the embedded store (``PromptWrites``: the server's loop storing a put):
whom they wait for, what they commit, and when they are durable. Two ``WriteLock``s on one
path hold separate ``flock``s, as two processes do."""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from app.storage.base import WriteBusy
from app.storage.sqlite import SqliteStore
from app.storage.sqlite_write import WriteLock
from tests.conftest import SyncerDisk


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
        tmp_path: Path, syncer_disk: SyncerDisk) -> None:
    store = SqliteStore(tmp_path / "store.db")  # synchronous=FULL
    with store.prompt():
        for number in range(3):
            with store.transaction() as db:
                assert db.execute("PRAGMA synchronous").fetchone() == (1,)  # NORMAL
                db.execute("INSERT INTO hbase_tables (name, families) VALUES (?, '{}')",
                           (f"t{number}",))
    assert syncer_disk.synced() == []
    store.durable().result(timeout=10)
    assert syncer_disk.synced() == [str(tmp_path / "store.db-wal")]
    store.durable().result(timeout=0)  # nothing new: done at once
    assert len(syncer_disk.synced()) == 1
    with store.transaction() as db:  # outside prompt(): SQLite's own sync, as configured
        assert db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    assert store.table_names() == ["t0", "t1", "t2"]
    store.close()


def test_a_commit_made_while_a_sync_is_under_way_waits_for_the_next_one(
        tmp_path: Path, syncer_disk: SyncerDisk) -> None:
    """A sync covers the commits made before it was asked for, not those made while it
    runs: they are acknowledged by the next one, asked for as soon as it is done."""
    store = SqliteStore(tmp_path / "store.db")
    syncer_disk.hold()
    with store.prompt(), store.transaction() as db:
        db.execute("INSERT INTO hbase_tables (name, families) VALUES ('first', '{}')")
    first = store.durable()
    time.sleep(0.2)  # the syncer has been asked and holds
    with store.prompt(), store.transaction() as db:
        db.execute("INSERT INTO hbase_tables (name, families) VALUES ('second', '{}')")
    second = store.durable()
    assert not first.done() and not second.done()
    syncer_disk.release()
    first.result(timeout=10)
    second.result(timeout=10)
    assert len(syncer_disk.synced()) == 2
    store.close()


def test_a_syncer_that_dies_is_started_again_and_the_commits_waiting_are_synced(
        tmp_path: Path, syncer_disk: SyncerDisk) -> None:
    store = SqliteStore(tmp_path / "store.db")
    syncer_disk.hold()
    with store.prompt(), store.transaction() as db:
        db.execute("INSERT INTO hbase_tables (name, families) VALUES ('t', '{}')")
    waiting = store.durable()
    [first] = syncers_of(str(tmp_path / "store.db-wal"))
    os.kill(first, signal.SIGKILL)
    syncer_disk.release()
    waiting.result(timeout=10)
    assert syncer_disk.synced() == [str(tmp_path / "store.db-wal")]
    assert first not in syncers_of(str(tmp_path / "store.db-wal"))  # a new one synced
    store.close()


def test_a_failed_sync_fails_every_commit_it_was_to_make_durable(
        tmp_path: Path, syncer_disk: SyncerDisk) -> None:
    store = SqliteStore(tmp_path / "store.db")
    syncer_disk.fail(errno.EIO)
    with store.prompt(), store.transaction() as db:
        db.execute("INSERT INTO hbase_tables (name, families) VALUES ('t', '{}')")
    with pytest.raises(OSError) as failed:
        store.durable().result(timeout=10)
    assert failed.value.errno == errno.EIO
    store.close()


def test_closing_the_store_ends_its_syncer(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "store.db")
    with store.prompt(), store.transaction() as db:
        db.execute("INSERT INTO hbase_tables (name, families) VALUES ('t', '{}')")
    store.durable().result(timeout=10)
    assert len(syncers_of(str(tmp_path / "store.db-wal"))) == 1
    store.close()
    assert syncers_of(str(tmp_path / "store.db-wal")) == []


def syncers_of(wal_path: str) -> list[int]:
    """This process's living syncer processes for ``wal_path``, by their command lines."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or \
                    int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # exited meanwhile
        if wal_path.encode() in command and \
                (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            pids.append(int(entry.name))
    return pids


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
