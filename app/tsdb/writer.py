"""Writing data points: validation as ``PutDataPointRpc`` does it, then cells as ``TSDB.addPoint``.

Each point is validated on its own; the good ones of a batch are written together in one
``put_many`` (or one append per row in append mode), and an error is returned per bad point.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.errors import BadRequestError, NoSuchUniqueName, StorageError, TsdbError
from app.storage import codec
from app.tsdb import TSDB
from app.tsdb.uid import validate_name
from plugin.manager import plugin_points

MAX_MS_TIMESTAMP = 9_999_999_999_999
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INTEGER_TEXT = re.compile(r"[+-]?\d+")

Value = int | float
SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class DataPoint:
    """A validated point: ``timestamp`` in seconds or milliseconds (OpenTSDB's SECOND_MASK rule)."""

    metric: str
    timestamp: int
    value: Value
    tags: Mapping[str, str]


def parse_value(raw: Any) -> Value:
    """OpenTSDB's value rules: integer text without ``.eE`` is a long, anything else a double."""
    if isinstance(raw, bool):
        raise BadRequestError("Unable to parse value to a number")
    if isinstance(raw, int):
        if not LONG_MIN <= raw <= LONG_MAX:
            raise BadRequestError("Unable to parse value to a number")
        return raw
    if isinstance(raw, float):
        if math.isnan(raw) or math.isinf(raw):
            raise BadRequestError("Unable to parse value to a number")
        return raw
    return parse_value_text(str(raw).strip())


def parse_value_text(text: str) -> Value:
    """The text form of :func:`parse_value` (``Tags.looksLikeInteger``: no ``.eE``)."""
    try:
        if "." in text or "e" in text or "E" in text or not INTEGER_TEXT.fullmatch(text):
            number = float(text)
            if math.isnan(number) or math.isinf(number):
                raise ValueError(text)
            return number
        value = int(text)
    except ValueError:
        raise BadRequestError("Unable to parse value to a number") from None
    if not LONG_MIN <= value <= LONG_MAX:
        raise BadRequestError("Unable to parse value to a number")
    return value


def parse_timestamp(raw: Any) -> int:
    """A positive integer (seconds or ms); 'Invalid timestamp' otherwise."""
    if isinstance(raw, bool) or raw is None:
        raise BadRequestError("Invalid timestamp")
    try:
        timestamp = int(raw)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON Infinity
        raise BadRequestError("Invalid timestamp") from None
    if timestamp <= 0:
        raise BadRequestError("Invalid timestamp")
    if timestamp > MAX_MS_TIMESTAMP:
        raise BadRequestError(f"bad timestamp={timestamp}")
    return timestamp


def parse_point(raw: Any) -> DataPoint:
    """Validate one point of a put body, in OpenTSDB's order and with its messages."""
    if not isinstance(raw, Mapping):
        raise BadRequestError("Unable to parse the given JSON", "A data point must be an object")
    metric = raw.get("metric")
    if not metric or not isinstance(metric, str):
        raise BadRequestError("Metric name was empty")
    timestamp = parse_timestamp(raw.get("timestamp"))
    if raw.get("value") is None or raw.get("value") == "":
        raise BadRequestError("Empty value")
    tags = raw.get("tags")
    if not tags or not isinstance(tags, Mapping):
        raise BadRequestError("Missing tags")
    value = parse_value(raw["value"])
    return DataPoint(metric, timestamp, value, {str(k): str(v) for k, v in tags.items()})


class PointWriter:
    """Turns points into cells and writes them; caches each series' row-key template."""

    def __init__(self, tsdb: TSDB) -> None:
        self.tsdb = tsdb
        self.config = tsdb.config
        self._templates: dict[SeriesKey, bytes] = {}
        self._time_offset = tsdb.layout.salt_width + tsdb.layout.metric_width
        self.appends: bool = self.config["tsd.storage.enable_appends"]

    def write(self, points: Sequence[DataPoint], compact_rows: bool = False) -> list[str | None]:
        """Write the valid points; return one error message (or None) per point, in order.

        Write-filter plugins see each point first, publisher plugins the stored ones after.

        :param compact_rows: write the points a batch has for one hour row as one compacted
            column instead of single cells (the bulk importer's fast path: the bytes are what
            compaction would produce, and later cells of that hour merge with it as usual).
        """
        return plugin_points(self.tsdb.plugins, points,
                             lambda valid: self._write_points(valid, compact_rows))

    def _write_points(self, points: Sequence[DataPoint],
                      compact_rows: bool) -> list[str | None]:
        errors: list[str | None] = []
        cells: list[tuple[bytes, bytes, bytes]] = []
        for point in points:
            try:
                cells.append(self.cell(point))
                errors.append(None)
            except StorageError:
                raise  # the store failed, not the point: the whole request fails (500/503)
            except TsdbError as exc:
                errors.append(exc.message)
        self.store_cells(cells, compact_rows)
        return errors

    def cell(self, point: DataPoint) -> tuple[bytes, bytes, bytes]:
        """``(row_key, qualifier, value)`` of one point (qualifier is the append column in
        append mode, and value then the append entry)."""
        return self.cell_in_series(self.row_template(point.metric, point.tags),
                                   point.timestamp, point.value)

    def cell_in_series(self, template: bytes, timestamp: int,
                       value: Value) -> tuple[bytes, bytes, bytes]:
        """:meth:`cell` for a series whose :meth:`row_template` the caller already has."""
        base_time_s, qualifier, value_bytes = codec.point_cell(timestamp, value)
        row = self.row_for(template, base_time_s)
        if self.appends:
            return row, codec.APPEND_QUALIFIER, qualifier + value_bytes
        return row, qualifier, value_bytes

    def row_for(self, template: bytes, base_time_s: int) -> bytes:
        """The row key of a series' hour row, from its template."""
        return (template[: self._time_offset] + base_time_s.to_bytes(4, "big")
                + template[self._time_offset + 4:])

    def store_cells(self, cells: Sequence[tuple[bytes, bytes, bytes]],
                    compact_rows: bool = False) -> None:
        if not cells:
            return
        table = self.tsdb.data_table()
        if self.appends:
            entries: dict[bytes, bytes] = {}
            for row, _, entry in cells:
                entries[row] = entries.get(row, b"") + entry
            for row, entry in entries.items():
                table.append(row, b"t:" + codec.APPEND_QUALIFIER, entry)
            return
        rows: dict[bytes, dict[bytes, bytes]] = {}
        for row, qualifier, value in cells:
            rows.setdefault(row, {})[qualifier] = value
        if compact_rows:
            rows = {row: _compacted(row_cells) for row, row_cells in rows.items()}
        table.put_many((row, {b"t:" + q: v for q, v in row_cells.items()})
                       for row, row_cells in sorted(rows.items()))
        if self.tsdb.compaction_queue is not None:
            self.tsdb.compaction_queue.add(rows)

    def row_template(self, metric: str, tags: Mapping[str, str]) -> bytes:
        """The series' row key with a zero base time (the salt does not depend on time)."""
        key: SeriesKey = (metric, tuple(sorted(tags.items())))
        template = self._templates.get(key)
        if template is None:
            template = self._build_template(metric, tags)
            self._templates[key] = template
        return template

    def _build_template(self, metric: str, tags: Mapping[str, str]) -> bytes:
        max_tags = self.config["tsd.storage.max_tags"]
        if len(tags) > max_tags:
            raise BadRequestError(f"Too many tags: {len(tags)} maximum allowed: {max_tags}, "
                                  f"tags: {{{', '.join(f'{k}={v}' for k, v in tags.items())}}}")
        specials = self.config["tsd.core.tag.allow_specialchars"]
        validate_name("metric", metric, specials)
        for tagk, tagv in tags.items():
            validate_name("tag name", tagk, specials)
            validate_name("tag value", tagv, specials)
        metric_uid = self._uid("metrics", metric, "tsd.core.auto_create_metrics", metric, tags)
        pairs = [(self._uid("tagk", k, "tsd.core.auto_create_tagks", metric, tags),
                  self._uid("tagv", v, "tsd.core.auto_create_tagvs", metric, tags))
                 for k, v in tags.items()]
        return self.tsdb.layout.row_key(metric_uid, 0, pairs)

    def _uid(self, kind: str, name: str, auto_create_key: str, metric: str,
             tags: Mapping[str, str]) -> bytes:
        uids = self.tsdb.uids[kind]
        if self.config[auto_create_key]:
            return uids.get_or_create_id(name, metric, tags)
        try:
            return uids.get_id(name)
        except NoSuchUniqueName:
            label = {"metrics": "metric", "tagk": "tagk", "tagv": "tagv"}[kind]
            raise BadRequestError(f"Unknown {label}") from None


def _compacted(cells: dict[bytes, bytes]) -> dict[bytes, bytes]:
    if len(cells) < 2:
        return cells
    compacted = codec.compact_cells(cells.items())
    return dict([compacted]) if compacted else cells
