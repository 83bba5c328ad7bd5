"""The embedded store sets itself up on first use; a bad path is a clear error.

Real processes race on one new SQLite file, as gunicorn workers do on a first start.
"""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from app import create_app
from app.cli import main
from app.config import load_config
from app.errors import StorageError
from app.tsdb import TSDB

TABLES = ["tsdb", "tsdb-meta", "tsdb-tree", "tsdb-uid"]


def test_a_new_file_answers_at_once_and_keeps_what_was_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    client = create_app({"tsd.storage": "sqlite:///new/pytsd.db",
                         "tsd.core.auto_create_metrics": True}).test_client()
    assert not (tmp_path / "new").exists()  # nothing happens before the first use
    first = client.get("/api/suggest?type=metrics")
    assert (first.status_code, first.get_json()) == (200, [])
    put = client.post("/api/put", json={"metric": "m.new", "timestamp": 1700000000, "value": 5,
                                        "tags": {"host": "a"}})
    assert put.status_code == 204, put.get_data(as_text=True)
    query = client.get("/api/query?start=1699999000&end=1700001000&m=sum:m.new")
    assert query.get_json()[0]["dps"] == {"1700000000": 5}
    assert (tmp_path / "new" / "pytsd.db").is_file()  # relative to the working directory


def _open_and_assign(url: str, name: str, start_at: float) -> str:
    """One 'worker': open the new store at the same instant as the others, then write."""
    tsdb = TSDB(load_config({"tsd.storage": url}, environ={}))
    time.sleep(max(0.0, start_at - time.time()))
    try:
        return tsdb.metrics.get_or_create_id(name).hex()
    finally:
        tsdb.close()


def test_processes_racing_on_a_new_file_all_succeed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'raced.db'}"
    names = [f"race.{n}" for n in range(6)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(names)) as pool:
        start_at = time.time() + 2.0  # after every spawned interpreter has started
        uids = pool.starmap(_open_and_assign, [(url, name, start_at) for name in names])
    assert sorted(uids) == [f"{n:06x}" for n in range(1, 7)]  # one UID each, none lost
    tsdb = TSDB(load_config({"tsd.storage": url}, environ={}))
    assert tsdb.store.table_names() == TABLES
    assert {name: tsdb.metrics.get_id(name).hex() for name in names} == dict(zip(names, uids))
    tsdb.close()


def test_an_existing_store_is_left_as_it_is(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    tsdb = TSDB(load_config({"tsd.storage": url}, environ={}))
    uid = tsdb.metrics.get_or_create_id("kept")
    tsdb.close()
    again = TSDB(load_config({"tsd.storage": url}, environ={}))
    assert again.metrics.get_id("kept") == uid
    assert again.store.table_names() == TABLES
    again.close()


def test_a_folder_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("in the way")
    url = f"sqlite:///{tmp_path / 'a-file' / 'sub' / 'x.db'}"
    response = create_app({"tsd.storage": url}).test_client().get("/api/suggest?type=metrics")
    assert response.status_code == 500
    error = response.get_json()["error"]
    expected = f"Cannot open or create the embedded store {tmp_path}/a-file/sub/x.db"
    assert error["message"] == expected
    assert "Not a directory" in error["details"] and "TSD_STORAGE" in error["details"]
    with pytest.raises(StorageError, match="Cannot open or create the embedded store"):
        TSDB(load_config({"tsd.storage": url}, environ={})).store  # noqa: B018


def test_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("in the way")
    result = CliRunner().invoke(main, ["mkmetric", "x"], env={
        "TSD_STORAGE": f"sqlite:///{tmp_path / 'a-file' / 'x.db'}", "TSD_CONFIG": ""})
    assert result.exit_code == 1
    assert result.output.startswith("Error: Cannot open or create the embedded store ")
    assert "Traceback" not in result.output


def test_an_invalid_url_stops_the_app_at_start() -> None:
    with pytest.raises(Exception, match="Invalid tsd.storage URL: sqlite:///"):
        create_app({"tsd.storage": "sqlite:///"})
