"""The ``ClientService.Scan`` messages (``Client.proto``, ``HBase.proto``, ``Filter.proto``)
and ``hbase:meta``'s ``RegionInfo``, built and read with :mod:`wire`."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.storage.hbase_native import wire

REGION_NAME = 1  # RegionSpecifier.RegionSpecifierType
FILTER_PACKAGE = "org.apache.hadoop.hbase.filter."
MUST_PASS_ALL = 1  # FilterList.Operator


def region_specifier(region_name: bytes) -> bytes:
    return wire.field_varint(1, REGION_NAME) + wire.field_bytes(2, region_name)


def columns_message(columns: list[bytes]) -> bytes:
    """Thrift-style columns (``family`` or ``family:qualifier``) as ``Scan.column`` fields
    (``Column``: family 1, qualifier 2), one per family; a whole family wins."""
    qualifiers: dict[bytes, list[bytes] | None] = {}
    for column in columns:
        family, colon, qualifier = column.partition(b":")
        known = qualifiers.setdefault(family, [])
        if not colon or known is None:
            qualifiers[family] = None
        else:
            known.append(qualifier)
    return b"".join(wire.field_bytes(1, wire.field_bytes(1, family) + b"".join(
        wire.field_bytes(2, qualifier) for qualifier in chosen or ()))
        for family, chosen in qualifiers.items())


def scan(start: bytes, stop: bytes | None, columns: list[bytes], filter_message: bytes | None,
         caching: int) -> bytes:
    """A ``Scan``: column 1, start_row 3, stop_row 4, filter 5, caching 17,
    allow_partial_results 18 (off: whole rows)."""
    out = columns_message(columns)
    out += wire.field_bytes(3, start)
    if stop:
        out += wire.field_bytes(4, stop)
    if filter_message is not None:
        out += wire.field_bytes(5, filter_message)
    return out + wire.field_varint(17, caching) + wire.field_bool(18, False)


def open_request(region_name: bytes, scan_message: bytes, rows: int) -> bytes:
    """``ScanRequest``: region 1, scan 2, number_of_rows 4. client_handles_partials (7) and
    client_handles_heartbeats (8) stay unset: the server then sends whole rows only, and no
    empty heartbeat replies."""
    return (wire.field_bytes(1, region_specifier(region_name)) + wire.field_bytes(2, scan_message)
            + wire.field_varint(4, rows))


def next_request(scanner_id: int, rows: int, call_seq: int) -> bytes:
    """``ScanRequest``: scanner_id 3, number_of_rows 4, next_call_seq 6 (the server refuses
    a call out of sequence: a reply lost is a scan to reopen)."""
    return (wire.field_varint(3, scanner_id) + wire.field_varint(4, rows)
            + wire.field_varint(6, call_seq))


def close_request(scanner_id: int) -> bytes:
    """``ScanRequest``: scanner_id 3, number_of_rows 4 = 0, close_scanner 5."""
    return wire.field_varint(3, scanner_id) + wire.field_varint(4, 0) + wire.field_bool(5, True)


@dataclass
class ScanReply:
    """What a ``ScanResponse`` says (cells_per_result 1, scanner_id 2, more_results 3,
    results 5, more_results_in_region 8)."""

    cells_per_row: list[int]
    scanner_id: int
    more_results: bool
    more_in_region: bool
    pb_results: list[bytes] = field(default_factory=list)


def _uint32s(values: list[int | bytes]) -> list[int]:
    out: list[int] = []
    for value in values:
        if isinstance(value, int):
            out.append(value)
            continue
        pos = 0  # a packed run
        while pos < len(value):
            number, pos = wire.read_varint(value, pos)
            out.append(number)
    return out


def scan_reply(data: bytes) -> ScanReply:
    found = wire.message(data)
    results = [value for value in found.get(5, []) if isinstance(value, bytes)]
    return ScanReply(_uint32s(found.get(1, [])), wire.first_int(found, 2),
                     bool(wire.first_int(found, 3, 1)), bool(wire.first_int(found, 8, 1)),
                     results)


# ------------------------------------------------------------------ filters

def named_filter(name: str, serialized: bytes) -> bytes:
    """``Filter``: name 1 (the filter's Java class), serialized_filter 2."""
    return wire.field_bytes(1, FILTER_PACKAGE + name) + wire.field_bytes(2, serialized)


def key_only_filter(length_as_value: bool = False) -> bytes:
    """``KeyOnlyFilter``: len_as_val 1."""
    return named_filter("KeyOnlyFilter", wire.field_bool(1, length_as_value))


def column_prefix_filter(prefixes: list[bytes]) -> bytes:
    """``MultipleColumnPrefixFilter``: sorted_prefixes 1 (sorted, as HBase's client sends)."""
    return named_filter("MultipleColumnPrefixFilter",
                        b"".join(wire.field_bytes(1, prefix) for prefix in sorted(prefixes)))


def all_filters(filters: list[bytes]) -> bytes:
    """``FilterList``: operator 1 = MUST_PASS_ALL, filters 2."""
    return named_filter("FilterList", wire.field_varint(1, MUST_PASS_ALL) + b"".join(
        wire.field_bytes(2, one) for one in filters))


# ------------------------------------------------------------------ hbase:meta

@dataclass(frozen=True)
class Region:
    """One region of a table, as ``hbase:meta`` lists it."""

    name: bytes  # the meta row key: table,start,id.encoded.
    start: bytes
    end: bytes  # b"": the table's end
    server: str  # host:port; "" while not assigned

    def holds(self, key: bytes) -> bool:
        return self.start <= key and (not self.end or key < self.end)


def region_info(value: bytes) -> tuple[bytes, bytes, bool]:
    """``(start_key, end_key, offline or split)`` of an ``info:regioninfo`` cell: ``PBUF``
    then ``RegionInfo`` (start_key 3, end_key 4, offline 5, split 6, replica_id 7)."""
    if not value.startswith(b"PBUF"):
        raise wire.WireError("info:regioninfo is not a protobuf")
    found = wire.message(value[4:])
    gone = bool(wire.first_int(found, 5)) or bool(wire.first_int(found, 6))
    replica = wire.first_int(found, 7)
    return wire.first_bytes(found, 3), wire.first_bytes(found, 4), gone or replica != 0
