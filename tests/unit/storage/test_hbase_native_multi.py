"""The native write path's messages (``hbase_native.multi``) against bytes written by hand:
a put's ``Action`` and its cells as a ``KeyValueCodec`` cell block, a ``RegionAction``, a
``MultiRequest``, the failures read from a ``MultiResponse``; and the request header that
announces a cell block (``rpc``)."""

from __future__ import annotations

import socket
import threading

import pytest

from app.errors import StorageUnavailableError
from app.storage.hbase_native import multi
from app.storage.hbase_native.messages import Region
from app.storage.hbase_native.rpc import Connection, RpcError

LATEST = b"\x7f\xff\xff\xff\xff\xff\xff\xff"


def test_a_put_is_an_action_naming_its_row_and_its_cells_in_the_cell_block() -> None:
    actions, cells = multi.put_actions([
        (b"r1", {b"t:\x00\x01": b"\x07", b"t:qq": b""}),
        (b"row2", {b"fam:": b"\x01\x02"}),
    ])
    # Action.mutation 2 = MutationProto: row 1, mutate_type 2 = PUT (2),
    # associated_cell_count 8 (field 8, varint: key 0x40).
    assert actions == [b"\x12\x08" + b"\x0a\x02r1" + b"\x10\x02" + b"\x40\x02",
                       b"\x12\x0a" + b"\x0a\x04row2" + b"\x10\x02" + b"\x40\x01"]
    # A KeyValue: the length of the rest, the key's length, the value's length, then the key
    # (row length 2 bytes, row, family length 1 byte, family, qualifier, timestamp 8 bytes,
    # type 4 = Put) and the value.
    first = (b"\x00\x00\x00\x1a" + b"\x00\x00\x00\x11" + b"\x00\x00\x00\x01"
             + b"\x00\x02r1" + b"\x01t" + b"\x00\x01" + LATEST + b"\x04" + b"\x07")
    second = (b"\x00\x00\x00\x19" + b"\x00\x00\x00\x11" + b"\x00\x00\x00\x00"
              + b"\x00\x02r1" + b"\x01t" + b"qq" + LATEST + b"\x04")
    third = (b"\x00\x00\x00\x1d" + b"\x00\x00\x00\x13" + b"\x00\x00\x00\x02"
             + b"\x00\x04row2" + b"\x03fam" + LATEST + b"\x04" + b"\x01\x02")
    assert b"".join(cells) == first + second + third


def test_a_row_put_again_with_other_cells_names_its_new_cell_count() -> None:
    # The row's Action is kept from the first put (put_actions' cache): a second put of the
    # row with two cells, then one again, must each say their own count.
    for count in (1, 2, 1, 3):
        columns = {b"t:" + bytes([n]): b"\x05" for n in range(count)}
        actions, cells = multi.put_actions([(b"again", columns)])
        assert actions == [b"\x12\x0b\x0a\x05again\x10\x02\x40" + bytes([count])]
        assert b"".join(cells) == b"".join(
            b"\x00\x00\x00\x1c" + b"\x00\x00\x00\x13" + b"\x00\x00\x00\x01"
            + b"\x00\x05again" + b"\x01t" + bytes([n]) + LATEST + b"\x04" + b"\x05"
            for n in range(count))


def test_a_region_action_numbers_its_actions_and_a_multi_request_holds_them() -> None:
    action = b"\x12\x08\x0a\x02r1\x10\x02\x40\x01"
    region = multi.region_action(b"tsdb,,1.abc.", [action, action])
    # region 1 = RegionSpecifier (type 1 = REGION_NAME, value 2); each action 3 with index 1.
    specifier = b"\x08\x01\x12\x0ctsdb,,1.abc."
    numbered = [b"\x08\x00" + action, b"\x08\x01" + action]
    assert region == (b"\x0a\x10" + specifier + b"\x1a\x0c" + numbered[0]
                      + b"\x1a\x0c" + numbered[1])
    assert multi.multi_request([region, b"xy"]) == (b"\x0a\x2e" + region + b"\x0a\x02xy")


def _pair(name: bytes, text: bytes) -> bytes:  # NameBytesPair: name 1, value 2
    return b"\x0a" + bytes([len(name)]) + name + b"\x12" + bytes([len(text)]) + text


def test_every_action_answered_without_an_exception_is_no_failure() -> None:
    # What HBase 2.6 answered to two puts: a RegionActionResult of two ResultOrException
    # (index 1, an empty result 2), then an empty regionStatistics 3.
    response = b"\x0a\x0c\x0a\x04\x08\x00\x12\x00\x0a\x04\x08\x01\x12\x00\x1a\x00"
    assert multi.multi_failures(response, [2]) == []
    # 200 actions: indexes from 128 on take two bytes (0x80 0x01 ...).
    answers = b"".join(b"\x0a\x04\x08" + bytes([i]) + b"\x12\x00" for i in range(128)) + b"".join(
        b"\x0a\x05\x08" + bytes([i & 0x7F | 0x80, 1]) + b"\x12\x00" for i in range(128, 200))
    region = b"\x0a" + bytes([len(answers) & 0x7F | 0x80, len(answers) >> 7]) + answers
    assert multi.multi_failures(region, [200]) == []
    assert multi.multi_failures(region, [201])[0].message == "Multi answered 200 of 201 actions"


def test_failures_of_an_action_of_a_region_and_a_missing_answer() -> None:
    moved = _pair(b"org.apache.hadoop.hbase.exceptions.RegionMovedException",
                  b"Region moved to: host\nat ...")
    family = _pair(b"org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException",
                   b"no family x")
    # Region 0: action 0 written, action 1 failed (exception 3). Region 1: the region's
    # exception 2. Region 2: one of two actions answered.
    region0 = (b"\x0a\x04\x08\x00\x12\x00" + b"\x0a" + bytes([len(family) + 4]) + b"\x08\x01\x1a"
               + bytes([len(family)]) + family)
    region1 = b"\x12" + bytes([len(moved)]) + moved
    region2 = b"\x0a\x04\x08\x00\x12\x00"
    response = b"".join(b"\x0a" + bytes([len(r)]) + r for r in (region0, region1, region2))
    failures = multi.multi_failures(response, [2, 3, 2])
    assert [(f.region, f.index, f.short_class, f.message) for f in failures] == [
        (0, 1, "NoSuchColumnFamilyException", "no family x"),
        (1, None, "RegionMovedException", "Region moved to: host"),
        (2, None, "", "Multi answered 1 of 2 actions"),
    ]
    with pytest.raises(RpcError, match="answered 1 of 2 regions"):
        multi.multi_failures(b"\x0a\x00", [1, 1])


def test_a_call_with_a_cell_block_announces_its_length_in_the_request_header() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        received: list[bytes] = []

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                data = b""
                while len(data) < 300:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                received.append(data)

        thread = threading.Thread(target=serve)
        thread.start()
        connection = Connection("127.0.0.1", server.getsockname()[1], timeout_s=0.5)
        with pytest.raises(RpcError):  # the "server" never answers
            connection.call("Multi", b"\x0a\x00", b"CELLS")
        thread.join()
    data = received[0]
    header_at = data.index(b"org.apache.hadoop.hbase.codec.KeyValueCodec") + 43
    frame = data[header_at:]
    # The frame: its length (4 bytes), then the RequestHeader (call_id 1 = 0, method_name 3,
    # request_param 4, timeout 7 = 500 ms, cell_block_meta 5 = {length 1 = 5}), the request,
    # then the cell block.
    header = b"\x08\x00\x1a\x05Multi\x20\x01\x38\xf4\x03\x2a\x02\x08\x05"
    body = bytes([len(header)]) + header + b"\x02\x0a\x00" + b"CELLS"
    assert frame == len(body).to_bytes(4, "big") + body


def test_an_append_asks_for_no_result_and_sends_its_cell_as_a_put_cell() -> None:
    actions, cells = multi.append_actions([(b"r1", b"t:\x05\x00", b"\x09")])
    # MutationProto: row 1, mutate_type 2 = APPEND (0), attribute 5 = NameBytesPair
    # {name "_rr_", value false}, associated_cell_count 8 = 1.
    mutation = b"\x0a\x02r1" + b"\x10\x00" + b"\x2a\x09\x0a\x04_rr_\x12\x01\x00" + b"\x40\x01"
    assert actions == [b"\x12" + bytes([len(mutation)]) + mutation]
    assert b"".join(cells) == (b"\x00\x00\x00\x1a" + b"\x00\x00\x00\x11" + b"\x00\x00\x00\x01"
                               + b"\x00\x02r1" + b"\x01t" + b"\x05\x00" + LATEST + b"\x04"
                               + b"\x09")


def test_an_unanswered_put_is_sent_again_but_an_unanswered_append_never() -> None:
    region = Region(b"t,,1.x.", b"", b"", "rs:16020")
    calls: list[str] = []

    def call(server: str, method: str, request: bytes, cells: bytes) -> tuple[bytes, bytes]:
        calls.append(method)
        return b"\x0a\x00", b""  # a RegionActionResult answering none of the actions

    writer = multi.MultiWriter(call, lambda table, refresh: [region], "zk")
    with pytest.raises(StorageUnavailableError, match="1 rows were not written"):
        writer.put(b"t", [(b"r", {b"t:q": b"v"})])
    assert calls == ["Multi", "Multi"]
    calls.clear()
    with pytest.raises(StorageUnavailableError, match="append to t") as raised:
        writer.append(b"t", [(b"r", b"t:q", b"v")])
    assert "answered 0 of 1 actions" in str(raised.value.details)
    assert calls == ["Multi"]  # maybe applied: never appended twice
