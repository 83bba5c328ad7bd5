"""uid metasync / metapurge / delete / rename over both backends (OpenTSDB's MetaSync,
MetaPurge, UniqueId.deleteAsync and rename), and the CLI wiring on the embedded store."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from app.cli import main
from app.meta.sync import delete_uid, metapurge, metasync
from app.tsdb import TSDB
from app.tsdb.writer import DataPoint, PointWriter

T0 = 1356998400  # an hour boundary
A = bytes.fromhex("000001000001000001")  # sys.cpu{host=a}
B = bytes.fromhex("000001000001000002")  # sys.cpu{host=b}


def write(tsdb: TSDB) -> None:
    points = [DataPoint("sys.cpu", T0 + 7205, 1, {"host": "a"}),
              DataPoint("sys.cpu", T0 + 3601, 2, {"host": "b"}),
              DataPoint("sys.cpu", T0 + 10, 3, {"host": "a"})]
    assert PointWriter(tsdb).write(points) == [None, None, None]


def ts_meta(created: int, tsuid: bytes) -> bytes:
    return (b'{"tsuid":"' + tsuid.hex().upper().encode() + b'","displayName":"","description":'
            b'"","notes":"","created":' + str(created).encode() + b',"custom":null,"units":"",'
            b'"dataType":"","retention":0,"max":"NaN","min":"NaN"}')


def uid_meta(kind: str, created: int) -> bytes:
    return (b'{"type":"' + kind.encode() + b'","displayName":"","description":"","notes":"",'
            b'"created":' + str(created).encode() + b',"custom":null}')


def test_metasync_creates_what_is_missing(tsdb: TSDB) -> None:
    write(tsdb)
    report = metasync(tsdb)
    assert (report.rows, report.series, report.ts_metas_created, report.uid_metas_written) == (
        3, 2, 2, 4)
    one = (1).to_bytes(8, "big")
    assert dict(tsdb.meta_table().scan()) == {
        A: {b"name:ts_ctr": one, b"name:ts_meta": ts_meta(T0, A)},
        B: {b"name:ts_ctr": one, b"name:ts_meta": ts_meta(T0 + 3600, B)}}
    uid_table = tsdb.uid_table()
    assert uid_table.row(b"\x00\x00\x01", [b"name:metric_meta", b"name:tagk_meta",
                                           b"name:tagv_meta"]) == {
        b"name:metric_meta": uid_meta("METRIC", T0), b"name:tagk_meta": uid_meta("TAGK", T0),
        b"name:tagv_meta": uid_meta("TAGV", T0)}
    assert uid_table.row(b"\x00\x00\x02", [b"name:tagv_meta"]) == {
        b"name:tagv_meta": uid_meta("TAGV", T0 + 3600)}
    again = metasync(tsdb)
    assert (again.ts_metas_created, again.ts_metas_updated, again.uid_metas_written) == (0, 0, 0)


def test_metasync_fixes_a_late_created_and_keeps_counters(tsdb: TSDB) -> None:
    write(tsdb)
    tsdb.meta_table().put(A, {b"name:ts_ctr": (7).to_bytes(8, "big"),
                              b"name:ts_meta": ts_meta(T0 + 7200, A)})
    report = metasync(tsdb)
    assert (report.ts_metas_created, report.ts_metas_updated) == (1, 1)
    assert tsdb.meta_table().row(A) == {b"name:ts_ctr": (7).to_bytes(8, "big"),
                                        b"name:ts_meta": ts_meta(T0, A)}


def test_metapurge_and_delete(tsdb: TSDB) -> None:
    write(tsdb)
    metasync(tsdb)
    assert metapurge(tsdb) == (4, 4)  # ts_ctr+ts_meta twice; sys.cpu, host, a, b
    assert list(tsdb.meta_table().scan()) == []
    assert delete_uid(tsdb, "tagv", "b") == b"\x00\x00\x02"
    table = tsdb.uid_table()
    assert table.row(b"b") == {}
    assert table.row(b"\x00\x00\x02", [b"name:tagv"]) == {}
    assert tsdb.tagv.find_id("b") is None


def test_cli_commands(tmp_path: Path) -> None:
    env = {"TSD_STORAGE": f"sqlite:///{tmp_path / 'cli.db'}", "TSD_CONFIG": "",
           "TSD_CORE_AUTO_CREATE_METRICS": "true"}

    def run(*args: str) -> str:
        result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    source = tmp_path / "points.txt"
    source.write_text(f"sys.cpu {T0 + 10} 3 host=a\n")
    run("import", "--no-progress", str(source))
    assert run("uid", "metasync").endswith(
        "scanned 1 rows, 1 series: 1 TSMeta created, 0 updated, 3 UIDMeta written, "
        "0 UIDs without a name\n")
    assert run("uid", "treesync") == "processed 1 TSMeta objects through 0 trees\n"
    assert run("uid", "rename", "metrics", "sys.cpu", "sys.cpu.user") == (
        "metrics sys.cpu renamed to sys.cpu.user\n")
    assert run("uid", "grep", "metrics", "cpu") == "metrics sys.cpu.user: 000001\n"
    assert run("uid", "metapurge") == (
        "deleted 2 cells from the meta table and 3 UIDMeta cells\n")
    assert run("uid", "delete", "tagk", "host") == "UID tagk host (000001) deleted.\n"
    cells = [json.loads(line) for line in run("cells", "tsdb-meta").splitlines()]
    assert cells == []
