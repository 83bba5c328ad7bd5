"""Concurrent writers of one process share SQLite transactions (GroupCommit): every write is
committed before its call returns, and a failure reaches every writer of its group."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from app.storage.sqlite import SqliteStore

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
    with pytest.raises(sqlite3.IntegrityError):  # value NOT NULL: the transaction fails
        table.put_many([(b"row", {b"f:q": None})])  # type: ignore[dict-item]
    table.put_many([(b"row", {b"f:q": b"v"})])  # rolled back, and the group is free again
    assert table.row(b"row") == {b"f:q": b"v"}
