"""The hour cache's look at a range's first row (``cached.first_row``) asks the region
servers for one row, through Thrift and natively."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.config import load_config
from app.storage.hbase_scan import Scanner
from app.tsdb import TSDB
from app.tsdb.read.cached import first_row
from tests.conftest import backend_config, drop_tables, hbase_zk_quorum, make_tsdb

ROWS = [(b"k%03d" % i, {b"t:\x00\x00": bytes([i]), b"t:\x00\x10": b"\x01\x02"})
        for i in range(40)]
START, STOP = b"k", b"l"


@pytest.fixture(params=["thrift", "native"])
def tsdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TSDB]:
    config = backend_config("hbase", tmp_path)
    writer = make_tsdb(config)
    writer.data_table().put_many(ROWS)
    reader = TSDB(load_config({**config, "tsd.storage.hbase.scan_rpc": request.param,
                               "tsd.storage.hbase.zk_quorum": hbase_zk_quorum()}, environ={}))
    yield reader
    reader.close()
    drop_tables(writer)


def test_a_look_at_the_first_row_asks_for_one_row(tsdb: TSDB,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The hour cache's look at a range's first row asks the region servers for one row,
    not a scanner's first batch (100 compacted rows cost the region server about what a
    full read of them does: their deleted cells are walked)."""
    asked: list[int] = []
    real = Scanner._next

    def noted(self: Scanner, scanner_id: int, count: int, resume: bytes) -> Any:
        asked.append(count)
        return real(self, scanner_id, count, resume)
    monkeypatch.setattr(Scanner, "_next", noted)
    found = first_row(tsdb.data_table(), [(START, STOP)])
    assert found is not None and found[0] == ROWS[0][0]
    assert found[1][0] == 2  # its cells
    assert asked == [1]
