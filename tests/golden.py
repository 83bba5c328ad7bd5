"""OpenTSDB's golden bytes for the put of sys.cpu.nice=18 at 1346846400 host=web01 on an
empty store (spec §7.6, UniqueId.java's layout), shared by the backend and raw-HBase tests."""

from __future__ import annotations

ONE = b"\x00\x00\x01"
# Row 000001 50473EC0 000001 000001 (metric, 1346846400, host, web01), qualifier 0000
# (offset 0, 1-byte int), value 0x12 = 18.
PUT_ROW = bytes.fromhex("00000150473EC0000001000001")
PUT_QUALIFIER = b"\x00\x00"
PUT_VALUE = b"\x12"
# Forward rows name -> id:kind, reverse rows uid -> name:kind, MAXID row 0x00 with 8-byte
# counters.
PUT_UID_CELLS = {
    (b"\x00", b"id:metrics", (1).to_bytes(8, "big")),
    (b"\x00", b"id:tagk", (1).to_bytes(8, "big")),
    (b"\x00", b"id:tagv", (1).to_bytes(8, "big")),
    (ONE, b"name:metrics", b"sys.cpu.nice"), (ONE, b"name:tagk", b"host"),
    (ONE, b"name:tagv", b"web01"),
    (b"sys.cpu.nice", b"id:metrics", ONE), (b"host", b"id:tagk", ONE),
    (b"web01", b"id:tagv", ONE),
}
