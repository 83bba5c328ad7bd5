"""Issue 27: a native ``Multi`` of puts with the cells as a ``KeyValueCodec`` cell block (what
``hbase_native.multi`` sends) against the same puts with a protobuf ``ColumnValue`` per cell,
alternating rounds of the same run. Rows as ``/api/put`` writes them: one cell each, OpenTSDB's
row keys and qualifiers' lengths. Prints, per encoding, this process's CPU per row (building
the request and the call), the region server's (the HMaster JVM of the standalone HBase) and
the wall time.

    python bench/bench_hbase_multi.py [--hbase HOST:PORT] [--zk HOST[:PORT]] [--rows N]
        [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.storage.hbase import HBaseStore  # noqa: E402
from app.storage.hbase_native import multi, wire  # noqa: E402
from app.storage.hbase_native.client import NativeClient  # noqa: E402
from bench.bench_hbase_put import java_pids  # noqa: E402
from bench.common import pid_cpu_s  # noqa: E402

Encode = Callable[[list[tuple[bytes, dict[bytes, bytes]]]], tuple[list[bytes], bytes]]


def cell_block(rows: list[tuple[bytes, dict[bytes, bytes]]]) -> tuple[list[bytes], bytes]:
    actions, cells = multi.put_actions(rows)
    return actions, b"".join(cells)


def protobuf(rows: list[tuple[bytes, dict[bytes, bytes]]]) -> tuple[list[bytes], bytes]:
    """Each row's cells inside its ``MutationProto``: column_value 3 = ``ColumnValue``
    (family 1, qualifier_value 2 = {qualifier 1, value 2})."""
    actions = []
    for row, columns in rows:
        by_family: dict[bytes, list[bytes]] = {}
        for column, value in columns.items():
            family, _, qualifier = column.partition(b":")
            by_family.setdefault(family, []).append(
                wire.field_bytes(1, qualifier) + wire.field_bytes(2, value))
        mutation = wire.field_bytes(1, row) + wire.field_varint(2, multi.PUT) + b"".join(
            wire.field_bytes(3, wire.field_bytes(1, family) + b"".join(
                wire.field_bytes(2, one) for one in values))
            for family, values in by_family.items())
        actions.append(wire.field_bytes(2, mutation))
    return actions, b""


def rows_for(round_no: int, count: int) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """OpenTSDB-shaped rows: 3-byte metric, 4-byte hour, two 3+3-byte tags; a 2-byte
    qualifier, a 1-byte value."""
    return [(b"\x00\x00\x01" + (1_700_000_000 + round_no * 3600).to_bytes(4, "big")
             + b"\x00\x00\x01" + i.to_bytes(3, "big") + b"\x00\x00\x02\x00\x00\x01",
             {b"t:" + ((i % 3600) << 4).to_bytes(2, "big"): bytes([i % 256])})
            for i in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hbase", default=os.environ.get("TSD_TEST_HBASE", "127.0.0.1:9090"))
    parser.add_argument("--zk", default=None)
    parser.add_argument("--rows", type=int, default=2000, help="rows per Multi")
    parser.add_argument("--calls", type=int, default=20, help="Multi calls per round")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    host, _, port = args.hbase.rpartition(":")
    store = HBaseStore(host, int(port), f"benchmulti{uuid.uuid4().hex[:8]}_", writers=0)
    store.create_table("tsdb", {"t": {}})
    client = NativeClient(args.zk or f"{host}:2181")
    table = store.table("tsdb").full_name
    region_server = java_pids("org.apache.hadoop.hbase.master.HMaster")
    print(f"{args.calls} Multi calls of {args.rows} one-cell rows per round; region server "
          f"JVM {region_server}; load average {os.getloadavg()[0]:.1f}")
    encodings: dict[str, Encode] = {"cell block": cell_block, "protobuf": protobuf}
    try:
        for round_no in range(args.rounds):
            order = list(encodings.items())
            for name, encode in order[::-1] if round_no % 2 else order:
                batches = [rows_for(round_no * 100 + call + (50 if name == "protobuf" else 0),
                                    args.rows) for call in range(args.calls)]
                (region,) = client.regions(table)
                rs_before = sum(pid_cpu_s(pid) for pid in region_server)
                cpu_before, started = time.process_time(), time.perf_counter()
                for rows in batches:
                    actions, cells = encode(rows)
                    request = multi.multi_request([multi.region_action(region.name, actions)])
                    response, _ = client.call(region.server, "Multi", request, cells)
                    assert multi.multi_failures(response, [len(rows)]) == []
                wall = time.perf_counter() - started
                cpu = time.process_time() - cpu_before
                rs = sum(pid_cpu_s(pid) for pid in region_server) - rs_before
                total = args.rows * args.calls
                print(f"round {round_no} {name:<10}: {total / wall:>9,.0f} rows/s, pytsd "
                      f"{cpu / total * 1e6:5.2f} us/row, region server {rs / total * 1e6:5.2f} "
                      f"us/row")
    finally:
        client.close()
        store.drop_tables()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
