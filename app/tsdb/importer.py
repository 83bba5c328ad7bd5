"""Bulk import of OpenTSDB's text format: ``metric timestamp value tagk=tagv ...`` per line.

Lines are parsed into per-series columns; each batch is encoded per series with numpy
(:mod:`app.storage.codec_bulk`) into one compacted column per hour row, so a million points
cost a few thousand storage rows instead of a million.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from app.errors import BadRequestError, NoSuchUniqueName
from app.storage.codec_bulk import encode_series
from app.tsdb.points import MAX_MS_TIMESTAMP
from app.tsdb.writer import PointWriter, parse_timestamp, parse_value_text

BATCH_POINTS = 50_000
LINE_FORMAT = "expected: metric timestamp value tagk=tagv [tagk=tagv ...]"


def parse_tags(words: Iterable[str]) -> dict[str, str]:
    tags = {}
    for word in words:
        tagk, sep, tagv = word.partition("=")
        if not sep or not tagk or not tagv:
            raise BadRequestError(f"invalid tag: {word}")
        tags[tagk] = tagv
    return tags


@dataclass
class _Columns:
    template: bytes
    ts: list[int] = field(default_factory=list)
    values: list[int | float] = field(default_factory=list)


class Importer:
    """Collects lines, writes a batch whenever ``pending`` reaches ``BATCH_POINTS``."""

    def __init__(self, writer: PointWriter) -> None:
        self.writer = writer
        self.templates: dict[str, bytes] = {}
        self.series: dict[str, _Columns] = {}
        self.pending = 0

    def add(self, line: str) -> None:
        """Parse one line; raise :class:`TsdbError` with the reason when it is bad."""
        words = line.split()
        if len(words) < 4:
            raise BadRequestError(LINE_FORMAT)
        key = " ".join(words[3:]) + " " + words[0]
        columns = self.series.get(key)
        if columns is None:
            template = self.templates.get(key)
            if template is None:
                template = self._template(words[0], parse_tags(words[3:]))
                self.templates[key] = template
            columns = self.series[key] = _Columns(template)
        timestamp, value = parse_timestamp(words[1]), parse_value_text(words[2])
        if timestamp > MAX_MS_TIMESTAMP:
            raise BadRequestError(f"bad timestamp={timestamp}")
        columns.ts.append(timestamp)
        columns.values.append(value)
        self.pending += 1

    def _template(self, metric: str, tags: dict[str, str]) -> bytes:
        try:
            return self.writer.row_template(metric, tags)
        except NoSuchUniqueName as exc:
            label = {"metrics": "metric"}.get(exc.kind, exc.kind)
            raise BadRequestError(f"Unknown {label}") from None

    def flush(self) -> int:
        """Write what is pending; return the number of points written."""
        cells: list[tuple[bytes, bytes, bytes]] = []
        for columns in self.series.values():
            cells += self._encode(columns)
        self.writer.store_cells(cells, compact_rows=True)
        written, self.pending, self.series = self.pending, 0, {}
        return written

    def _encode(self, columns: _Columns) -> list[tuple[bytes, bytes, bytes]]:
        writer = self.writer
        is_float = np.fromiter((isinstance(v, float) for v in columns.values), dtype=bool,
                               count=len(columns.values))
        floats = np.array([float(v) for v in columns.values], dtype=np.float64)
        ints = np.where(is_float, 0, np.array(
            [0 if isinstance(v, float) else v for v in columns.values], dtype=np.int64))
        encoded = None if writer.appends else encode_series(
            np.array(columns.ts, dtype=np.int64), ints, floats, is_float)
        if encoded is None:
            return [writer.cell_in_series(columns.template, ts, value)
                    for ts, value in zip(columns.ts, columns.values)]
        return [(writer.row_for(columns.template, base_time_s), qualifier, value)
                for base_time_s, qualifier, value in encoded]



