"""Shared fixtures: a TSDB, app and client per storage backend, and a demo-data client.

Backends: the embedded SQLite store always; a real HBase when ``TSD_TEST_HBASE=host:port``
is set (``make hbase-up`` then ``make test`` sets it). In CI (``CI=true``) a missing HBase is
an error, never a silent skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app import create_app
from app.config import load_config
from app.meta.tree_builder import attach_tree_processing
from app.storage import hbase, sqlite_sync, sqlite_syncer
from app.tsdb import TSDB, hour_cache, writer
from app.tsdb.schema import create_tables

ROOT = Path(__file__).resolve().parent
TIERS = ("unit", "functional", "integration", "e2e", "differential")
BACKENDS = ("sqlite", "hbase")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by its folder (a test outside the known tiers is a mistake), and
    ``hbase`` where it runs against HBase: ``-m "not hbase"`` runs without one."""
    for item in items:
        tier = Path(str(item.fspath)).resolve().relative_to(ROOT).parts[0]
        if tier not in TIERS:
            raise RuntimeError(f"Unknown test tier {tier!r} for {item.nodeid}")
        item.add_marker(getattr(pytest.mark, tier))
        if tier == "integration" or _backend_param(item) == "hbase":
            item.add_marker(pytest.mark.hbase)


def _backend_param(item: pytest.Item) -> object:
    callspec = getattr(item, "callspec", None)  # only parametrized tests have one
    return None if callspec is None else callspec.params.get("backend")


def hbase_address() -> str | None:
    address = os.environ.get("TSD_TEST_HBASE")
    if not address and os.environ.get("CI") == "true":
        pytest.fail("CI must run the HBase tests: TSD_TEST_HBASE is not set")
    return address


def hbase_zk_quorum() -> str | None:
    """The test HBase's ZooKeeper (``TSD_TEST_HBASE_ZK``, default: ``TSD_TEST_HBASE``'s host,
    port 2181), for the native scan client (``tsd.storage.hbase.scan_rpc=native``)."""
    address = hbase_address()
    if not address:
        return None
    return os.environ.get("TSD_TEST_HBASE_ZK") or address.rpartition(":")[0] + ":2181"


class HBaseTableSets:
    """Table prefixes reused across tests. Creating and dropping OpenTSDB's four tables on
    HBase costs ~5 s per test; clearing the rows of a recycled set costs ~30 ms."""

    def __init__(self) -> None:
        self.free: list[str] = []
        self.known: set[str] = set()

    def acquire(self) -> str:
        prefix = self.free.pop() if self.free else f"t{uuid.uuid4().hex[:10]}_"
        self.known.add(prefix)
        return prefix

    def release(self, prefix: str) -> None:
        if prefix in self.known and prefix not in self.free:
            self.free.append(prefix)

    def recycle(self, config: dict[str, Any]) -> None:
        """Clear and release a test's table set that no ``drop_tables`` released."""
        prefix = config.get("tsd.storage.hbase.table_prefix")
        if prefix not in self.known or prefix in self.free:
            return
        from app.storage.hbase import HBaseStore

        store = HBaseStore.from_config(load_config(config, environ={}))
        store.clear_tables()
        store.close()
        self.release(prefix)

    def drop_all(self) -> None:
        """At the end of the session: drop every table this session created."""
        address = os.environ.get("TSD_TEST_HBASE")
        if not self.known or not address:
            return
        from app.storage.hbase import HBaseStore

        host, _, port = address.rpartition(":")
        for prefix in sorted(self.known):
            store = HBaseStore(host, int(port), prefix)
            store.drop_tables()
            store.close()
        self.known.clear()
        self.free.clear()


HBASE_TABLE_SETS = HBaseTableSets()


@pytest.fixture(scope="session", autouse=True)
def _drop_hbase_tables_at_exit() -> Iterator[None]:
    yield
    HBASE_TABLE_SETS.drop_all()


def backend_config(backend: str, tmp_path: Path, extra: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """Settings for a fresh, empty store of ``backend``."""
    if backend == "hbase":
        address = hbase_address()
        if not address:
            pytest.skip("HBase tests need TSD_TEST_HBASE=host:port (run `make hbase-up`)")
        config = {"tsd.storage": f"hbase://{address}",
                  "tsd.storage.hbase.table_prefix": HBASE_TABLE_SETS.acquire(),
                  # scan_rpc=auto (the default): native scans where this ZooKeeper answers
                  "tsd.storage.hbase.zk_quorum": hbase_zk_quorum()}
    else:
        config = {"tsd.storage": f"sqlite:///{tmp_path / 'tsdb.db'}"}
    return {**config, **(extra or {})}


def make_tsdb(config: dict[str, Any]) -> TSDB:
    """A TSDB as the server and the CLI open one (tree processing attached from above)."""
    tsdb = TSDB(load_config(config, environ={}))
    attach_tree_processing(tsdb)
    create_tables(tsdb.store, tsdb.config)
    return tsdb


def drop_tables(tsdb: TSDB) -> None:
    """Empty a recycled HBase table set (or drop other HBase tables) after a test."""
    prefix = tsdb.config.get("tsd.storage.hbase.table_prefix")
    clear = getattr(tsdb.store, "clear_tables", None)
    drop = getattr(tsdb.store, "drop_tables", None)
    if clear is not None and prefix in HBASE_TABLE_SETS.known:
        clear()
        HBASE_TABLE_SETS.release(prefix)
    elif drop is not None:
        drop()
    tsdb.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def tsd_config(backend: str, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Settings for an empty store; tests may add keys before building the app."""
    config = backend_config(backend, tmp_path, {"tsd.core.auto_create_metrics": True})
    yield config
    HBASE_TABLE_SETS.recycle(config)


def write_from_another_process(config: dict[str, Any], metric: str, tags: dict[str, str],
                               points: list[tuple[int, float]]) -> None:
    """Write ``(timestamp, value)`` points of one series from another OS process (another
    pytsd on the same store: nothing it does reaches this process's memory)."""
    script = (
        "import json, sys\n"
        "from app.config import load_config\n"
        "from app.tsdb import TSDB\n"
        "from app.tsdb.writer import DataPoint, PointWriter\n"
        "config, metric, tags, points = (json.loads(a) for a in sys.argv[1:])\n"
        "tsdb = TSDB(load_config(config, environ={}))\n"
        "errors = PointWriter(tsdb).write([DataPoint(metric, ts, v, tags)\n"
        "                                  for ts, v in points])\n"
        "assert not any(errors), errors\n")
    subprocess.run([sys.executable, "-c", script, *map(json.dumps, (config, metric, tags, points))],
                   check=True, timeout=60)


@pytest.fixture
def settled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hour cache's clock a minute on: rows just written count as settled (5 s), and so
    do their ranges (30 s)."""
    real = hour_cache.clock_ms
    monkeypatch.setattr(hour_cache, "clock_ms", lambda: real() + 60_000)


@pytest.fixture
def stamps_cheap(monkeypatch: pytest.MonkeyPatch) -> None:
    """HBase stamps every row, however many cells it holds, as it stamps a compacted row: for
    tests of the hour cache's workings on rows of single cells (which, not compacted, a warm
    read on HBase otherwise reads whole: their stamps cost more than their values)."""
    monkeypatch.setattr(hbase, "STAMP_DEARER_CELLS", 2**62)


# The real syncer (app/storage/sqlite_syncer.py) run with its fdatasync watched: each file
# synced is logged, a sync waits while the "hold" file exists, and raises the errno in the
# "fail" file if there is one.
WATCHED_SYNCER = """
import os, runpy, sys, time
syncer, wal_path, folder = sys.argv[1:]
real_sync = os.fdatasync
def watched(fd):
    while os.path.exists(os.path.join(folder, "hold")):
        time.sleep(0.01)
    with open(os.path.join(folder, "synced"), "a") as log:
        log.write(os.readlink(f"/proc/self/fd/{fd}") + "\\n")
    if os.path.exists(os.path.join(folder, "fail")):
        code = int(open(os.path.join(folder, "fail")).read())
        raise OSError(code, os.strerror(code))
    real_sync(fd)
os.fdatasync = watched
sys.argv = [syncer, wal_path]
runpy.run_path(syncer, run_name="__main__")
"""


class SyncerDisk:
    """The WAL syncs of the embedded store's syncer processes, as the fixture watches them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def synced(self) -> list[str]:
        """The files synced so far, in order."""
        log = self.folder / "synced"
        return log.read_text().splitlines() if log.exists() else []

    def hold(self) -> None:
        (self.folder / "hold").touch()

    def release(self) -> None:
        (self.folder / "hold").unlink()

    def fail(self, code: int) -> None:
        (self.folder / "fail").write_text(str(code))


@pytest.fixture
def syncer_disk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> SyncerDisk:
    """Syncer processes started from now on run watched (``WATCHED_SYNCER``)."""
    folder = tmp_path / "syncer-disk"
    folder.mkdir()
    monkeypatch.setattr(sqlite_sync, "syncer_command", lambda wal_path: [
        sys.executable, "-I", "-S", "-c", WATCHED_SYNCER, sqlite_syncer.__file__, wal_path,
        str(folder)])
    return SyncerDisk(folder)


@pytest.fixture
def single_cells(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers in this process put every batch through ``put_many``, a cell per point as
    OpenTSDB writes them (and as on HBase), instead of the embedded store's blocks, whose
    points its merge writes as one compacted cell per row: for tests that need rows of
    uncompacted single cells (compaction, the sweep, fsck, caches on a cell change)."""
    monkeypatch.setattr(writer, "BLOCK_MIN_POINTS", 2**62)


@pytest.fixture
def tsdb(tsd_config: dict[str, Any]) -> Iterator[TSDB]:
    tsdb = make_tsdb(tsd_config)
    yield tsdb
    drop_tables(tsdb)


def app_over(tsdb: TSDB) -> Flask:
    """The app over an existing TSDB (its store and UID caches), in testing mode."""
    app = create_app(dict(tsdb.config))
    attach_tree_processing(tsdb)  # as create_app does for the TSDB it opens
    app.extensions["tsdb"] = tsdb
    app.config["TESTING"] = True
    return app


@pytest.fixture
def app(tsdb: TSDB) -> Flask:
    return app_over(tsdb)


@pytest.fixture
def make_client(tsd_config: dict[str, Any]) -> Iterator[Callable[[dict[str, Any]], FlaskClient]]:
    """A factory of clients, each over a fresh store with extra settings (OpenTSDB keys)."""
    made: list[TSDB] = []

    def build(settings: dict[str, Any]) -> FlaskClient:
        tsdb = make_tsdb({**tsd_config, **settings})
        made.append(tsdb)
        return app_over(tsdb).test_client()

    yield build
    for tsdb in made:
        drop_tables(tsdb)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture(scope="session")
def demo_app(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    """An app over the embedded store with the demo data set (a day ending now)."""
    from app.tsdb.demo import load_demo

    path = tmp_path_factory.mktemp("demo") / "demo.db"
    config = {"tsd.storage": f"sqlite:///{path}", "tsd.core.auto_create_metrics": True}
    tsdb = make_tsdb(config)
    load_demo(tsdb)
    app = create_app(config)
    app.extensions["tsdb"] = tsdb
    app.config["TESTING"] = True
    return app


@pytest.fixture
def demo_client(demo_app: Flask) -> FlaskClient:
    return demo_app.test_client()
