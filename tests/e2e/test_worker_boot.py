"""What a gunicorn worker does before it reports ready (``READY_LOG``, which the benchmarks'
"fresh server" waits for): it opens its embedded store, and its split helper has opened its
own, so the first query pays neither (docs/performance.md, "A fresh server's first query")."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from app.server.worker import READY_LOG
from tests.e2e.test_split_server import _children, _is_helper
from tests.e2e.tsd_process import launch


def _wait_ready(log: Path, workers: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while log.read_text().count(READY_LOG) < workers:
        assert time.monotonic() < deadline, f"no worker ready:\n{log.read_text()}"
        time.sleep(0.05)


def _opened(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has the file ``path`` open."""
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            if os.readlink(fd) == str(path):
                return True
        except OSError:
            continue
    return False


def test_a_worker_opens_its_store_before_it_reports_ready(tmp_path: Path) -> None:
    """No request at all: the new store's file and OpenTSDB's tables exist once the worker
    says it is ready (a store opened lazily would still be absent)."""
    db = tmp_path / "boot.db"
    tsd = launch({"TSD_STORAGE": f"sqlite:///{db}", "TSD_QUERY_SPLIT_ENABLE": "false"},
                 tmp_path / "gunicorn.log", workers=1)
    try:
        _wait_ready(tsd.log, 1)
        assert db.exists()
        with sqlite3.connect(db) as conn:
            tables = {name for (name,) in conn.execute("SELECT name FROM hbase_tables")}
        assert {"tsdb", "tsdb-uid"} <= tables
        (worker,) = _children(tsd.process.pid)
        assert _opened(worker, db)
    finally:
        tsd.stop()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="no split helper on one core")
def test_a_worker_reports_ready_once_its_helper_has_opened_the_store(tmp_path: Path) -> None:
    db = tmp_path / "boot.db"
    tsd = launch({"TSD_STORAGE": f"sqlite:///{db}"}, tmp_path / "gunicorn.log", workers=1)
    try:
        _wait_ready(tsd.log, 1)
        (worker,) = _children(tsd.process.pid)
        helpers = [child for child in _children(worker) if _is_helper(child)]
        assert len(helpers) == 1
        assert _opened(helpers[0], db)  # before its first query
    finally:
        tsd.stop()
