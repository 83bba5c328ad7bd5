"""The ``pytsd`` command, run in-process with click's runner over a fresh embedded store."""

from __future__ import annotations

import gzip
import json
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from app.cli import main


@pytest.fixture
def run(tmp_path: Path) -> object:
    env = {"TSD_STORAGE": f"sqlite:///{tmp_path / 'cli.db'}", "TSD_CONFIG": ""}

    def invoke(*args: str) -> Result:
        result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
        return result

    assert invoke("create-tables").output.startswith("created: ")
    return invoke


def test_import_then_cells_shows_opentsdbs_bytes(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "points.txt"
    source.write_text("sys.cpu.nice 1346846400 18 host=web01\n")
    result = run("import", "--auto-metric", "--no-progress", str(source))
    assert result.exit_code == 0, result.output
    assert "imported 1 points (0 failed)" in result.output
    lines = [json.loads(line) for line in run("cells", "tsdb").output.splitlines()]
    assert lines == [{"row": "00000150473ec0000001000001", "family": "t",
                      "qualifier": "0000", "value": "12"}]
    uid_rows = {(c["row"], c["qualifier"], c["value"])
                for c in map(json.loads, run("cells", "tsdb-uid").output.splitlines())}
    assert (b"sys.cpu.nice".hex(), b"metrics".hex(), "000001") in uid_rows
    assert ("000001", b"metrics".hex(), b"sys.cpu.nice".hex()) in uid_rows


def test_import_gzip_batches_a_row_into_one_compacted_column(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "points.txt.gz"
    with gzip.open(source, "wt") as out:
        out.write("# a comment\n")
        out.write("m 1346846400 1 host=a\nm 1346846410 2.5 host=a\nnot a point\n")
    result = run("import", "--auto-metric", "--no-progress", str(source))
    assert result.exit_code == 1  # one bad line
    assert "imported 2 points (1 failed)" in result.output
    [cell] = [json.loads(line) for line in run("cells", "tsdb").output.splitlines()]
    # Qualifiers 0x0000 (1-byte int at +0 s) and 0x00AB (4-byte float at +10 s), values
    # 0x01 and 2.5f = 0x40200000, then the meta byte 0x00.
    assert (cell["qualifier"], cell["value"]) == ("000000ab", "014020000000")


def test_import_refuses_unknown_metrics_without_auto_metric(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "points.txt"
    source.write_text("m 1346846400 1 host=a\n")
    result = run("import", "--no-progress", str(source))
    assert result.exit_code == 1
    assert "Unknown metric" in result.output


def test_import_says_its_format_has_no_put(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # A line copied from the line protocol: OpenTSDB's import reads "put" as the metric and
    # fails on the value as a tag ("invalid tag: 1"); pytsd says what is wrong.
    source = tmp_path / "points.txt"
    source.write_text("put m 1346846400 1 host=a\nm 1346846400 1 host=a\n")
    result = run("import", "--auto-metric", "--no-progress", str(source))
    assert result.exit_code == 1
    assert "imported 1 points (1 failed)" in result.output
    assert (f"{source}:1: OpenTSDB's import format has no 'put': metric timestamp value "
            "tagk=tagv [tagk=tagv ...] (drop the leading 'put'): put m 1346846400 1 host=a"
            ) in result.output


def test_import_reports_the_put_parsers_reasons_by_line(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "points.txt"
    source.write_text("m 1346846400 1 host=a\nm 1346846400 x host=a\nm 0 1 host=a\n"
                      "m 1346846400 1 host\n")
    result = run("import", "--auto-metric", "--no-progress", "--no-plugins", str(source))
    assert "imported 1 points (3 failed)" in result.output
    assert f"{source}:2: Invalid character 'x' in x: m 1346846400 x host=a" in result.output
    assert f"{source}:3: invalid timestamp: 0: m 0 1 host=a" in result.output
    assert f"{source}:4: invalid tag: host: m 1346846400 1 host" in result.output


def test_uid_assign_grep_and_mkmetric(run) -> None:  # type: ignore[no-untyped-def]
    assert run("mkmetric", "sys.cpu.user").output == "metrics sys.cpu.user: 000001\n"
    assert run("uid", "assign", "tagk", "host").output == "tagk host: 000001\n"
    assert run("uid", "grep", "metrics", "cpu").output == "metrics sys.cpu.user: 000001\n"
    bad = CliRunner().invoke(main, ["mkmetric", "bad name"])
    assert bad.exit_code != 0


def test_scan_and_compact(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "points.txt"
    source.write_text("m 1346846400 1 host=a\n")
    run("import", "--auto-metric", "--no-progress", str(source))
    scanned = run("scan", "m").output
    assert "00000150473ec0000001000001 m 1346846400 (2012-09-05 12:00:00) host=a" in scanned
    assert "1346846400000=1" in scanned
    assert "scanned 1 rows" in run("compact").output


def test_version_is_the_one_in_pyproject() -> None:
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    result = CliRunner().invoke(main, ["--version"])
    assert (result.exit_code, result.output) == (0, f"pytsd {pyproject['project']['version']}\n")


def test_create_tables_on_a_new_embedded_store_names_the_four(tmp_path: Path) -> None:
    env = {"TSD_STORAGE": f"sqlite:///{tmp_path / 'new.db'}", "TSD_CONFIG": ""}
    first = CliRunner().invoke(main, ["create-tables"], env=env, catch_exceptions=False)
    assert first.output == "created: tsdb-uid, tsdb, tsdb-tree, tsdb-meta\n"
    again = CliRunner().invoke(main, ["create-tables"], env=env, catch_exceptions=False)
    assert again.output == "all tables exist\n"
