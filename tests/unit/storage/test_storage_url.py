"""``tsd.storage`` sqlite URLs follow SQLAlchemy's convention (app/storage/__init__.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.config import load_config
from app.errors import TsdbError
from app.storage import describe_storage, sqlite_path

CWD = Path("/home/me/work")


@pytest.mark.parametrize(("url", "expected"), [
    ("sqlite:///pytsd.db", "/home/me/work/pytsd.db"),
    ("sqlite:///data/pytsd.db", "/home/me/work/data/pytsd.db"),
    ("sqlite:///../elsewhere/x.db", "/home/me/work/../elsewhere/x.db"),
    ("sqlite:////var/lib/pytsd/x.db", "/var/lib/pytsd/x.db"),
    ("sqlite:////x.db", "/x.db"),
])
def test_three_slashes_then_the_path_as_written(url: str, expected: str) -> None:
    assert sqlite_path(url, CWD) == Path(expected)


def test_relative_is_from_the_working_directory_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert sqlite_path("sqlite:///sub/x.db") == tmp_path / "sub" / "x.db"


@pytest.mark.parametrize("url", [
    "sqlite://", "sqlite:///", "sqlite://x.db", "sqlite:///:memory:", "sqlite:///data/",
    "sqlite:///x.db?mode=ro",
])
def test_urls_naming_no_file_are_refused_with_both_forms(url: str) -> None:
    with pytest.raises(TsdbError) as caught:
        sqlite_path(url, CWD)
    assert caught.value.message == f"Invalid tsd.storage URL: {url}"
    assert "sqlite:///relative/path.db" in str(caught.value.details)
    assert "sqlite:////abs/path.db" in str(caught.value.details)


def test_the_startup_line_shows_the_resolved_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config({"tsd.storage": "sqlite:///d/x.db"}, environ={})
    assert describe_storage(config) == f"embedded store {tmp_path}/d/x.db (sqlite:///d/x.db)"


def test_the_default_store_is_data_pytsd_db_under_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = load_config(environ={})["tsd.storage"]
    assert sqlite_path(url, Path("/somewhere/else")) == tmp_path / "data" / "pytsd.db"
