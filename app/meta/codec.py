"""OpenTSDB 2.4's meta data cells: TSMeta in ``tsdb-meta``, UIDMeta in ``tsdb-uid``. Pure.

Layout (``TSMeta.java``, ``UIDMeta.java``)::

    tsdb-meta  row = TSUID (metric UID + tagk/tagv UIDs)  family name
               qualifier ts_meta -> TSMeta storage JSON
               qualifier ts_ctr  -> data points written, 8-byte big-endian long (its HBase
                                    write time is the series' ``lastReceived``)
    tsdb-uid   row = UID                                  family name
               qualifier metric_meta | tagk_meta | tagv_meta -> UIDMeta storage JSON

The storage JSON is what ``getStorageJSON`` writes with Jackson's generator: no whitespace,
fields in the order below, ``custom`` in the order Java's ``HashMap`` iterates it, NaN quoted.
OpenTSDB edits a meta cell with a compare-and-set against the stored bytes it re-serialises,
so pytsd writes exactly those bytes. The API JSON is Jackson's bean serialisation: the fields
that have a backing field of the same name first, in declaration order, then the getter-only
names (``displayName``, ``dataType``, ``lastReceived``, ``totalDatapoints``).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.jackson import jackson_string, java_double, java_hashmap_order

META_FAMILY = b"name"
TS_META_QUALIFIER = b"ts_meta"
TS_COUNTER_QUALIFIER = b"ts_ctr"
TS_META_COLUMN = META_FAMILY + b":" + TS_META_QUALIFIER
TS_COUNTER_COLUMN = META_FAMILY + b":" + TS_COUNTER_QUALIFIER
# The UID table's kinds -> UniqueIdType.toString() (the "type" field) and the meta qualifier.
UID_TYPES = {"metrics": "METRIC", "tagk": "TAGK", "tagv": "TAGV"}
KIND_OF_TYPE = {"metric": "metrics", "metrics": "metrics", "tagk": "tagk", "tagv": "tagv"}
# The fields a user may set, for POST (only those given) and PUT (all, defaults otherwise).
UID_USER_FIELDS = ("display_name", "description", "notes", "custom")
TS_USER_FIELDS = UID_USER_FIELDS + ("units", "data_type", "retention", "max", "min")


def uid_meta_column(kind: str) -> bytes:
    """``name:metric_meta`` (``type.toString().toLowerCase() + "_meta"``)."""
    return META_FAMILY + b":" + UID_TYPES[kind].lower().encode() + b"_meta"


def counter_bytes(value: int) -> bytes:
    """``Bytes.fromLong``: the ``ts_ctr`` cell."""
    return struct.pack(">q", value)


def counter_value(raw: bytes) -> int:
    """``Bytes.getLong`` of a ``ts_ctr`` cell (0 for a malformed one)."""
    return struct.unpack(">q", raw)[0] if len(raw) == 8 else 0


def tsuid_of_row(row: bytes, salt_width: int, metric_width: int) -> bytes:
    """``UniqueId.getTSUIDFromKey``: the row key without its salt and base time."""
    end_metric = salt_width + metric_width
    return row[salt_width:end_metric] + row[end_metric + 4:]


def created_s(now_ms: int) -> int:
    """TSMeta and UIDMeta record creation in seconds."""
    return now_ms // 1000


@dataclass
class UIDMeta:
    """One UID's meta data; ``kind`` is the UID table's (``metrics``, ``tagk``, ``tagv``)."""

    kind: str
    uid: str  # hex, upper case
    name: str = ""
    display_name: str = ""
    description: str = ""
    notes: str = ""
    created: int = 0
    custom: dict[str, str] | None = None

    def storage_json(self) -> bytes:
        """``UIDMeta#getStorageJSON``."""
        return _object([("type", jackson_string(UID_TYPES[self.kind])),
                        ("displayName", jackson_string(self.display_name)),
                        ("description", jackson_string(self.description)),
                        ("notes", jackson_string(self.notes)),
                        ("created", str(self.created)),
                        ("custom", _custom(self.custom))])

    def api_json(self) -> str:
        """The UIDMeta in API answers (no ``@JsonInclude``: a null ``custom`` is printed)."""
        return "{" + ",".join(f"{jackson_string(k)}:{v}" for k, v in self._api_fields()) + "}"

    def _api_fields(self) -> list[tuple[str, str]]:
        return [("uid", jackson_string(self.uid)), ("type", jackson_string(UID_TYPES[self.kind])),
                ("name", jackson_string(self.name)),
                ("description", jackson_string(self.description)),
                ("notes", jackson_string(self.notes)), ("created", str(self.created)),
                ("custom", _custom(self.custom)),
                ("displayName", jackson_string(self.display_name))]


@dataclass
class TSMeta:
    """One series' meta data (``tsuid`` hex, upper case); ``metric``/``tags`` when loaded."""

    tsuid: str
    display_name: str = ""
    description: str = ""
    notes: str = ""
    created: int = 0
    custom: dict[str, str] | None = None
    units: str = ""
    data_type: str = ""
    retention: int = 0
    max: float = math.nan
    min: float = math.nan
    last_received: int = 0
    total_dps: int = 0
    metric: UIDMeta | None = None
    tags: list[UIDMeta] | None = field(default=None)

    def storage_json(self) -> bytes:
        """``TSMeta#getStorageJSON``."""
        return _object([("tsuid", jackson_string(self.tsuid)),
                        ("displayName", jackson_string(self.display_name)),
                        ("description", jackson_string(self.description)),
                        ("notes", jackson_string(self.notes)),
                        ("created", str(self.created)),
                        ("custom", _custom(self.custom)),
                        ("units", jackson_string(self.units)),
                        ("dataType", jackson_string(self.data_type)),
                        ("retention", str(self.retention)),
                        ("max", java_double(self.max)),
                        ("min", java_double(self.min))])

    def api_json(self) -> str:
        """The TSMeta in API answers (``@JsonInclude(NON_NULL)``: null fields left out)."""
        fields = [("tsuid", jackson_string(self.tsuid))]
        if self.metric is not None:
            fields.append(("metric", self.metric.api_json()))
        if self.tags is not None:
            fields.append(("tags", "[" + ",".join(t.api_json() for t in self.tags) + "]"))
        fields += [("description", jackson_string(self.description)),
                   ("notes", jackson_string(self.notes)), ("created", str(self.created))]
        if self.custom is not None:
            fields.append(("custom", _custom(self.custom)))
        fields += [("units", jackson_string(self.units)), ("retention", str(self.retention)),
                   ("max", java_double(self.max)), ("min", java_double(self.min)),
                   ("displayName", jackson_string(self.display_name)),
                   ("dataType", jackson_string(self.data_type)),
                   ("lastReceived", str(self.last_received)),
                   ("totalDatapoints", str(self.total_dps))]
        return "{" + ",".join(f"{jackson_string(k)}:{v}" for k, v in fields) + "}"


# --- reading stored cells (OpenTSDB's or ours) ----------------------------------------------


def uid_meta_from_storage(kind: str, uid: str, name: str, raw: bytes) -> UIDMeta:
    """Parse a stored UIDMeta the way ``getUIDMeta`` does: name and UID from the table."""
    data = _parse_object(raw)
    return UIDMeta(kind=kind, uid=uid, name=name,
                   display_name=_text(data.get("displayName")),
                   description=_text(data.get("description")), notes=_text(data.get("notes")),
                   created=_long(data.get("created")), custom=_custom_of(data.get("custom")))


def ts_meta_from_storage(raw: bytes, tsuid: str) -> TSMeta:
    """Parse a ``ts_meta`` cell; a missing ``tsuid`` is the row's (``parseFromColumn``)."""
    data = _parse_object(raw)
    return TSMeta(tsuid=_text(data.get("tsuid")) or tsuid,
                  display_name=_text(data.get("displayName")),
                  description=_text(data.get("description")), notes=_text(data.get("notes")),
                  created=_long(data.get("created")), custom=_custom_of(data.get("custom")),
                  units=_text(data.get("units")), data_type=_text(data.get("dataType")),
                  retention=_long(data.get("retention")), max=_double(data.get("max")),
                  min=_double(data.get("min")))


def _parse_object(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw.decode("utf-8", errors="replace"))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _long(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _double(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _custom_of(value: Any) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    return {str(k): _text(v) for k, v in value.items()}


# --- Jackson's and Java's text ---------------------------------------------------------------


def _object(fields: Iterable[tuple[str, str]]) -> bytes:
    return ("{" + ",".join(f'"{k}":{v}' for k, v in fields) + "}").encode("utf-8",
                                                                           errors="replace")


def _custom(custom: Mapping[str, str] | None) -> str:
    if custom is None:
        return "null"
    return "{" + ",".join(f"{jackson_string(k)}:{jackson_string(custom[k])}"
                          for k in java_hashmap_order(custom)) + "}"


