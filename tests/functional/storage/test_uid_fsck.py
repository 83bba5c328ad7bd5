"""``uid fsck`` finds and repairs damaged UID rows, on every backend (OpenTSDB's UidManager)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from app.cli import main
from app.tsdb import TSDB
from app.tsdb.uid_fsck import fsck

MAXID = b"\x00"


def uid(n: int) -> bytes:
    return n.to_bytes(3, "big")


def healthy(tsdb: TSDB) -> None:
    """Names a put would create: metric sys.cpu.user, tagk host, tagv web01 and web02."""
    tsdb.metrics.get_or_create_id("sys.cpu.user")
    tsdb.tagk.get_or_create_id("host")
    tsdb.tagv.get_or_create_id("web01")
    tsdb.tagv.get_or_create_id("web02")


def cells(tsdb: TSDB, row: bytes) -> dict[bytes, bytes]:
    return dict(tsdb.uid_table().row(row))


def test_a_healthy_table_is_clean(tsdb: TSDB) -> None:
    healthy(tsdb)
    report = fsck(tsdb, fix=True)
    assert (report.errors, report.warnings, report.fixes) == ([], [], [])
    assert report.cells == 4 * 2 + 3  # forward and reverse per name, a MAXID per kind


def test_orphaned_reverse_mapping_is_reported_then_deleted(tsdb: TSDB) -> None:
    healthy(tsdb)
    # What a put that failed after assigning a UID leaves: the reverse row and the counter.
    table = tsdb.uid_table()
    table.counter_inc(MAXID, b"id:tagv")
    table.put(uid(3), {b"name:tagv": b"web03"})
    report = fsck(tsdb)
    assert report.errors == []
    assert report.warnings == ["Reverse tagv mapping is missing forward mapping: web03 -> 000003"]
    # MAXID gave out 3 tag value UIDs, 2 name something: one burned
    assert (report.names, report.burned) == ({"metrics": 1, "tagk": 1, "tagv": 2},
                                             {"metrics": 0, "tagk": 0, "tagv": 1})
    assert b"name:tagv" in cells(tsdb, uid(3))  # nothing written without fix
    report = fsck(tsdb, fix=True)
    assert report.fixes == ["Removed reverse tagv mapping 000003 -> web03"]
    assert b"name:tagv" not in cells(tsdb, uid(3))
    # The counter keeps 3: UIDs are never reused. It is now above the mappings, a warning.
    assert fsck(tsdb).warnings == [
        "Max ID for tagv is 3 but only 2 entries were found.  Maybe 1 IDs were deleted?"]
    assert fsck(tsdb).errors == []


def test_forward_without_reverse_is_restored(tsdb: TSDB) -> None:
    healthy(tsdb)
    tsdb.uid_table().delete(uid(2), [b"name:tagv"])
    report = fsck(tsdb, fix=True)
    assert report.errors == ["Forward tagv mapping is missing reverse mapping: web02 -> 000002"]
    assert report.fixes == ["Restored reverse tagv mapping 000002 -> web02"]
    assert cells(tsdb, uid(2))[b"name:tagv"] == b"web02"
    assert fsck(tsdb).errors == []


def test_reverse_naming_another_name_is_rewritten(tsdb: TSDB) -> None:
    healthy(tsdb)
    tsdb.uid_table().put(uid(1), {b"name:tagv": b"web02"})  # 000001 should be web01
    report = fsck(tsdb, fix=True)
    assert "Forward tagv mapping web01 -> 000001 is different than reverse mapping: " \
           "000001 -> web02" in report.errors
    assert cells(tsdb, uid(1))[b"name:tagv"] == b"web01"
    assert fsck(tsdb).errors == []


def test_two_names_on_one_uid_are_renamed(tsdb: TSDB) -> None:
    healthy(tsdb)
    tsdb.uid_table().put(b"web02", {b"id:tagv": uid(1)})  # web02 now collides with web01
    report = fsck(tsdb, fix=True)
    assert "UID collision: tagv 000001 is mapped from web01, web02" in report.errors
    assert cells(tsdb, b"fsck.web01.web02")[b"id:tagv"] == uid(1)
    assert cells(tsdb, uid(1))[b"name:tagv"] == b"fsck.web01.web02"
    assert b"id:tagv" not in cells(tsdb, b"web01")
    assert b"id:tagv" not in cells(tsdb, b"web02")
    # web02's own UID 000002 lost its forward mapping: an orphan, removed by the same fix.
    assert "Removed reverse tagv mapping 000002 -> web02" in report.fixes
    again = fsck(tsdb)
    assert again.errors == []


def test_uid_above_the_counter_raises_it(tsdb: TSDB) -> None:
    healthy(tsdb)
    table = tsdb.uid_table()
    table.put(b"web09", {b"id:tagv": uid(9)})
    table.put(uid(9), {b"name:tagv": b"web09"})
    report = fsck(tsdb, fix=True)
    assert report.errors == ["We found an ID of 9 for tagv but the max ID is only 2!  "
                             "Future IDs may be double-assigned!"]
    assert tsdb.tagv.max_id() == 9
    assert fsck(tsdb).errors == []
    tsdb.tagv.drop_caches()
    assert tsdb.tagv.get_or_create_id("web10") == uid(10)


def test_wrong_width_is_reported(tsdb: TSDB) -> None:
    healthy(tsdb)
    tsdb.uid_table().put(b"broken", {b"id:metrics": b"\x01"})
    assert fsck(tsdb).errors == ["Invalid metrics ID of length 1 (expected 3): broken -> 01"]


def test_cli_reports_then_fixes(tmp_path: Path) -> None:
    env = {"TSD_STORAGE": f"sqlite:///{tmp_path / 'cli.db'}", "TSD_CONFIG": ""}

    def run(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
        return result.exit_code, result.output

    run("create-tables")
    assert run("uid", "assign", "tagv", "web01", "web02")[0] == 0
    assert run("uid", "fsck") == (0, "metrics: 0 names, 0 UIDs taken, 0 burned (0.000 per name)\n"
                                     "tagk: 0 names, 0 UIDs taken, 0 burned (0.000 per name)\n"
                                     "tagv: 2 names, 2 UIDs taken, 0 burned (0.000 per name)\n"
                                     "5 UID cells analyzed: 0 errors, 0 warnings\n")
    from app.config import load_config

    damaged = TSDB(load_config({}, environ=env))
    damaged.uid_table().delete(uid(2), [b"name:tagv"])
    damaged.close()
    code, output = run("uid", "fsck")
    assert code == 1
    assert "ERROR: Forward tagv mapping is missing reverse mapping: web02 -> 000002" in output
    code, output = run("uid", "fsck", "--fix")
    assert code == 0, output
    assert "FIX: Restored reverse tagv mapping 000002 -> web02" in output
    assert output.endswith("after fixing: 0 errors, 0 warnings\n")
