"""Writing data points: ``TSDB.addPoint``'s checks and cells, for a whole batch at once.

A :class:`~app.tsdb.points.PointBatch` comes in parsed (``/api/put``, the line protocol,
:meth:`PointWriter.write`). The writer then, in OpenTSDB's order: rejects timestamps beyond
its range, validates each new series once (tag count, name lengths and characters), resolves
its UIDs (looking every name up before assigning any, so a rejected series assigns none),
encodes the accepted points' cells with numpy and stores them in one write (:meth:`_store`).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from app.errors import BadRequestError, NoSuchUniqueName, StorageError, TsdbError
from app.storage import codec
from app.storage.base import APPEND_MANY, PUT_BLOCK, CellBlock, able
from app.storage.codec_bulk import encode_cells, encode_columns, encode_points, encode_series
from app.tsdb import TSDB
from app.tsdb.points import (
    MAX_MS_TIMESTAMP,
    DataPoint,
    PointBatch,
    TagPairs,
    Value,
    echo,
    java_bytes_text,
    java_hashmap_order,
    java_hashmap_text,
    parse_point,
    parse_timestamp,
    parse_value,
    parse_value_text,
)
from app.tsdb.rollup_coverage import mark_rows
from app.tsdb.uid import validate_name
from plugin.manager import plugin_points

__all__ = ["DataPoint", "PointBatch", "PointWriter", "parse_point", "parse_timestamp",
           "parse_value", "parse_value_text"]

VECTOR_MIN_POINTS = 128  # batches at least this big are encoded with numpy
# Batches at least this big go to a store that takes blocks (``put_block``) as one: every batch,
# so the embedded store's merge writes each row's points of a merge step as ONE compacted cell
# (sqlite_merge.MergeChunk), /api/put's 50-point bodies included (encoded point by point below
# VECTOR_MIN_POINTS). Below it, batches go through ``put_many`` and stay single cells, as on
# HBase (what tests of compaction set up: tests/conftest.py ``single_cells``).
BLOCK_MIN_POINTS = 1
MAX_TEMPLATES = 200_000  # series whose row-key template a process keeps (then starts over)
Cell = tuple[bytes, bytes, bytes]
APPEND_COLUMN = b"t:" + codec.APPEND_QUALIFIER


def bad_timestamp(metric: str, tags: TagPairs, timestamp: int, value: Value,
                  wide_floats: bool) -> BadRequestError:
    """``TSDB.checkTimestampAndTags``'s message, naming the value bytes and the series."""
    flags, raw = _encode_value(value, wide_floats)
    return BadRequestError(f"bad timestamp={timestamp} when trying to add value="
                           f"{java_bytes_text(raw)}/{flags} to metric={echo(metric)}, "
                           f"tags={java_hashmap_text(tags)}")


class PointWriter:
    """Turns points into cells and writes them; caches each series' row-key template."""

    def __init__(self, tsdb: TSDB, plugins: bool = True) -> None:
        """``plugins``: False skips the write filter and real-time publisher plugins (a bulk
        backfill asked for it: ``pytsd import --no-plugins``); UID filters still apply."""
        self.tsdb = tsdb
        self.plugins = plugins
        self.config = tsdb.config
        self._templates: dict[object, bytes] = {}
        # (series key, base time) -> the hour row's key: a series writes the same row all hour.
        self._rows: dict[tuple[object, int], bytes] = {}
        # For blocks: series numbered, so a block of known rows finds them with no Python
        # step per series (:meth:`_block_rows`).
        self._numbers = _SeriesNumbers()
        self._time_offset = tsdb.layout.salt_width + tsdb.layout.metric_width
        self.appends: bool = self.config["tsd.storage.enable_appends"]

    @property
    def known_series(self) -> Container[object]:
        """Series keys this writer has validated and resolved (parsers skip their checks)."""
        return self._templates

    # --- the batch path -----------------------------------------------------------------

    def write_batch(self, batch: PointBatch, compact_rows: bool = False) -> int:
        """Validate and store ``batch``; record each rejection in ``batch.errors``.

        Returns the number of points stored. A storage failure raises (the whole batch
        fails: :class:`StorageError`, a 500/503), never a per-point error.
        """
        self._check_timestamps(batch)
        # In order of first appearance: new names get UIDs in the order they arrive.
        clean = batch.errors.count(None) == len(batch)
        keys = dict.fromkeys(batch.series_of if clean else (
            key for key, error in zip(batch.series_of, batch.errors) if error is None))
        templates, refused = self._templates_for(batch, keys)
        accepted: Sequence[int]
        if clean and not refused:
            accepted = range(len(batch))  # the common case: every point stored
        else:
            accepted = []
            for i, key in enumerate(batch.series_of):
                if batch.errors[i] is not None:
                    continue
                if key in refused:
                    batch.errors[i] = refused[key]
                else:
                    accepted.append(i)
        if not self.plugins:
            self._store(batch, accepted, templates, compact_rows)
            return len(accepted)
        stored = plugin_points(self.tsdb.plugins, batch, accepted,
                               lambda ok: self._store(batch, ok, templates, compact_rows))
        return len(stored)

    def _check_timestamps(self, batch: PointBatch) -> None:
        if not batch.timestamps or max(batch.timestamps) <= MAX_MS_TIMESTAMP:
            return
        for i, timestamp in enumerate(batch.timestamps):
            if timestamp > MAX_MS_TIMESTAMP and batch.errors[i] is None:
                metric, tags = batch.series[batch.series_of[i]]
                batch.errors[i] = bad_timestamp(metric, tags, timestamp, batch.values[i],
                                                batch.wide_floats)

    def _templates_for(self, batch: PointBatch, keys: dict[object, None]
                       ) -> tuple[Mapping[object, bytes], dict[object, TsdbError]]:
        """The template of each series (built and cached when new), or why it is refused."""
        if len(self._templates) > MAX_TEMPLATES:
            self._templates = {}
        cache = self._templates
        if cache.keys() >= keys.keys():  # every series known (a collector's steady state):
            return cache, {}  # the cache itself, no copy (it is only added to, or replaced)
        templates: dict[object, bytes] = {}
        refused: dict[object, TsdbError] = {}
        for key in keys:
            template = cache.get(key)
            if template is None:
                metric, tags = batch.series[key]
                try:
                    template = cache[key] = self.row_template(metric, dict(tags), tags)
                except StorageError:
                    raise  # the store failed, not the series: the whole batch fails (503)
                except TsdbError as exc:
                    refused[key] = exc
                    continue
            templates[key] = template
        return templates, refused

    def _store(self, batch: PointBatch, accepted: Sequence[int],
               templates: Mapping[object, bytes], compact_rows: bool) -> None:
        """The one place a validated batch is stored: encode its accepted points, write them."""
        if not accepted:
            return
        if len(accepted) == len(batch):
            timestamps, values, series_of = batch.timestamps, batch.values, batch.series_of
        else:
            timestamps = [batch.timestamps[i] for i in accepted]
            values = [batch.values[i] for i in accepted]
            series_of = [batch.series_of[i] for i in accepted]
        if compact_rows and not self.appends and not batch.wide_floats and \
                self._store_compacted(series_of, timestamps, values, templates):
            return
        if not compact_rows and not self.appends and len(series_of) >= BLOCK_MIN_POINTS \
                and self.tsdb.tsuid_tracker is None:
            table = able(self.tsdb.data_table(), PUT_BLOCK)
            if table is not None:
                encode = self._block_rows if len(series_of) >= VECTOR_MIN_POINTS \
                    else self._small_block_rows
                self._stored(encode(series_of, timestamps, values, templates,
                                    batch.wide_floats, table.put_block))
                return
        bases, qualifiers, raws = _encode(timestamps, values, batch.wide_floats)
        appends = self.appends
        # row key -> its cells (two keys of one series share the row: its key is the same)
        rows: dict[bytes, dict[bytes, bytes]] = {}
        for row, qualifier, raw in zip(self._point_rows(series_of, bases, templates),
                                       qualifiers, raws):
            cells = rows.get(row)
            if cells is None:
                cells = rows[row] = {}
            if appends:  # one append entry per point, in order
                cells[APPEND_COLUMN] = cells.get(APPEND_COLUMN, b"") + qualifier + raw
            else:
                cells[b"t:" + qualifier] = raw
        self.store_rows(rows, compact_rows)

    def _block_rows(self, series_of: Sequence[object], timestamps: Sequence[int],
                    values: Sequence[Value], templates: Mapping[object, bytes],
                    wide_floats: bool, put_block: Callable[[CellBlock], None]) -> list[bytes]:
        """Encode the points as one :class:`CellBlock` (numpy: a step per distinct row, none
        per point), hand it to ``put_block``; return the row keys written."""
        numbers = self._numbers  # one consistent set, whatever other threads replace
        if numbers.full():
            numbers = self._numbers = _SeriesNumbers()
        try:  # every series numbered before (a collector's steady state): no step per series
            series = np.fromiter(map(numbers.codes.__getitem__, series_of), np.int64,
                                 len(series_of))
        except KeyError:
            numbers.number(series_of)
            series = np.fromiter(map(numbers.codes.__getitem__, series_of), np.int64,
                                 len(series_of))
        ints, floats, is_float = _value_arrays(values)
        columns = encode_columns(np.array(timestamps, dtype=np.int64), ints, floats, is_float,
                                 wide_floats)
        # One row per (series, base time): both in one int64 (base times are below 2**32).
        pairs, row_of = np.unique((series << 32) | columns.base_times_s, return_inverse=True)
        pair_list = pairs.tolist()
        found = list(map(numbers.rows.get, pair_list))
        rows = cast(list[bytes], found) if None not in found else [
            row if row is not None else self._new_row(numbers, pair, templates)
            for row, pair in zip(found, pair_list)]  # a new hour row: its key made once
        put_block(CellBlock(rows, row_of.reshape(-1), columns.qualifiers,
                            columns.qualifier_lengths, columns.values, columns.value_lengths))
        return rows

    def _new_row(self, numbers: _SeriesNumbers, pair: int, templates: Mapping[object, bytes]
                 ) -> bytes:
        """The key of the row ``pair`` (``number << 32 | base time``) names, kept."""
        row = numbers.rows[pair] = self.row_for(templates[numbers.keys[pair >> 32]],
                                                pair & 0xFFFFFFFF)
        return row

    def _small_block_rows(self, series_of: Sequence[object], timestamps: Sequence[int],
                          values: Sequence[Value], templates: Mapping[object, bytes],
                          wide_floats: bool, put_block: Callable[[CellBlock], None]
                          ) -> list[bytes]:
        """:meth:`_block_rows` for a batch too small for numpy's fixed cost per call (an
        ``/api/put`` body of 50 points): encoded point by point, still staged as one block, so
        the merge writes its rows' points as compacted cells (app/storage/sqlite_write.py)."""
        bases, qualifiers, raws = encode_cells(timestamps, values, wide_floats)
        index: dict[bytes, int] = {}
        rows: list[bytes] = []
        row_of: list[int] = []
        for row in self._point_rows(series_of, bases, templates):
            at = index.get(row)
            if at is None:
                at = index[row] = len(rows)
                rows.append(row)
            row_of.append(at)
        put_block(CellBlock.of_cells(rows, row_of, qualifiers, raws))
        return rows

    def _point_rows(self, series_of: Sequence[object], bases: Sequence[int],
                    templates: Mapping[object, bytes]) -> list[bytes]:
        """Each point's row key, from the keys this writer made before (up to
        ``MAX_TEMPLATES``, then it starts over)."""
        if len(self._rows) > MAX_TEMPLATES:
            self._rows = {}
        known_rows, row_for = self._rows, self.row_for
        keys = []
        for key, base in zip(series_of, bases):
            row = known_rows.get((key, base))
            if row is None:
                row = known_rows[(key, base)] = row_for(templates[key], base)
            keys.append(row)
        return keys

    def _stored(self, rows: Iterable[bytes]) -> None:
        """What follows a write of single cells to ``rows`` (as :meth:`store_rows` does)."""
        rows = list(rows)
        if self.tsdb.compaction_queue is not None:
            self.tsdb.compaction_queue.add(rows)
        mark_rows(self.tsdb, rows)  # after the cells: rollup_coverage's rule

    def _store_compacted(self, series_of: Sequence[object], timestamps: Sequence[int],
                         values: Sequence[Value], templates: Mapping[object, bytes]) -> bool:
        """Each series' points as one compacted column per hour row, encoded a series at a
        time with numpy (``codec_bulk``): what ``pytsd import`` writes, many times faster
        than compacting cell by cell. False (nothing written) when a timestamp is in ms."""
        by_series: dict[object, list[int]] = {}
        for i, key in enumerate(series_of):
            by_series.setdefault(key, []).append(i)
        rows: dict[bytes, dict[bytes, bytes]] = {}
        for key, indexes in by_series.items():
            points = [values[i] for i in indexes]
            is_float = np.fromiter((isinstance(v, float) for v in points), dtype=bool,
                                   count=len(points))
            floats = np.array([float(v) for v in points], dtype=np.float64)
            ints = np.array([0 if isinstance(v, float) else v for v in points], dtype=np.int64)
            encoded = encode_series(np.array([timestamps[i] for i in indexes], dtype=np.int64),
                                    ints, floats, is_float)
            if encoded is None:
                return False
            for base_time_s, qualifier, value in encoded:
                rows.setdefault(self.row_for(templates[key], base_time_s), {})[
                    b"t:" + qualifier] = value
        self.store_rows(rows)
        return True

    # --- points one by one (tests, the demo data) ----------------------------------------

    def write(self, points: Sequence[DataPoint], compact_rows: bool = False) -> list[str | None]:
        """Write the valid points; return one error message (or None) per point, in order.

        :param compact_rows: write the points a batch has for one hour row as one compacted
            column instead of single cells (the bytes compaction would produce; later
            cells of that hour merge with it as usual).
        """
        batch = PointBatch.of(points)
        self.write_batch(batch, compact_rows)
        return [None if error is None else error.message for error in batch.errors]

    def cell_in_series(self, template: bytes, timestamp: int, value: Value) -> Cell:
        """``(row_key, qualifier, value)`` of one point of a series whose template the caller
        has (the qualifier is the append column in append mode, the value its entry)."""
        base_time_s, qualifier, value_bytes = codec.point_cell(timestamp, value)
        row = self.row_for(template, base_time_s)
        if self.appends:
            return row, codec.APPEND_QUALIFIER, qualifier + value_bytes
        return row, qualifier, value_bytes

    def row_for(self, template: bytes, base_time_s: int) -> bytes:
        """The row key of a series' hour row, from its template."""
        return (template[: self._time_offset] + base_time_s.to_bytes(4, "big")
                + template[self._time_offset + 4:])

    def store_cells(self, cells: Sequence[Cell], compact_rows: bool = False) -> None:
        """Store ``(row, qualifier, value)`` cells (qualifier: the append column in append
        mode, value its entry)."""
        rows: dict[bytes, dict[bytes, bytes]] = {}
        for row, qualifier, value in cells:
            column = b"t:" + qualifier
            row_cells = rows.setdefault(row, {})
            row_cells[column] = row_cells.get(column, b"") + value if self.appends else value
        self.store_rows(rows, compact_rows)

    def store_rows(self, rows: dict[bytes, dict[bytes, bytes]], compact_rows: bool = False
                   ) -> None:
        """Write ``{row: {b"t:" + qualifier: value}}`` (appended to in append mode)."""
        if not rows:
            return
        table = self.tsdb.data_table()
        if self.appends:
            cells = [(row, column, entry) for row, row_cells in rows.items()
                     for column, entry in row_cells.items()]
            many = able(table, APPEND_MANY)  # HBase: the rows' appends in parallel
            if many is not None:
                many.append_many(cells)
            else:
                for row, column, entry in cells:
                    table.append(row, column, entry)
        else:
            if compact_rows:
                rows = {row: _compacted(row_cells) for row, row_cells in rows.items()}
            table.put_many(sorted(rows.items()))
            if self.tsdb.compaction_queue is not None:
                self.tsdb.compaction_queue.add(rows)
        mark_rows(self.tsdb, rows)  # after the cells: rollup_coverage's rule
        if self.tsdb.tsuid_tracker is not None:  # tsd.core.meta.*: app/meta/tracking.py
            self.tsdb.tsuid_tracker.track_rows(rows)

    # --- series: validation and UIDs -----------------------------------------------------

    def row_template(self, metric: str, tags: Mapping[str, str],
                     order: TagPairs | None = None) -> bytes:
        """The series' row key with a zero base time (the salt does not depend on time).

        Validates the series as ``IncomingDataPoints.checkMetricAndTags`` does (``order``:
        the tags as received, which decides which bad tag OpenTSDB names first), then
        resolves its UIDs, assigning none unless every one can be had.
        """
        pairs = order if order is not None else tuple(tags.items())
        self._check_series(metric, pairs)
        names = [("metrics", metric)] + [("tagk", k) for k in tags] + [("tagv", v)
                                                                        for v in tags.values()]
        for kind, name in names:
            uids = self.tsdb.uids[kind]
            if uids.find_id(name) is None and not self.config[AUTO_CREATE[kind]]:
                raise NoSuchUniqueName(kind, name)
        by_kind = self.tsdb.uids  # metric and tags: the point's, for the UID filter plugins
        metric_uid = by_kind["metrics"].get_or_create_id(metric, metric, tags)
        uid_pairs = [(by_kind["tagk"].get_or_create_id(k, metric, tags),
                      by_kind["tagv"].get_or_create_id(v, metric, tags)) for k, v in tags.items()]
        return self.tsdb.layout.row_key(metric_uid, 0, uid_pairs)

    def _check_series(self, metric: str, pairs: TagPairs) -> None:
        tags = dict(pairs)
        max_tags = self.config["tsd.storage.max_tags"]
        if not tags:
            raise BadRequestError(f"Need at least one tag (metric={echo(metric)}, tags={{}})")
        if len(tags) > max_tags:
            raise BadRequestError(f"Too many tags: {len(tags)} maximum allowed: {max_tags}, "
                                  f"tags: {java_hashmap_text(pairs)}")
        specials = self.config["tsd.core.tag.allow_specialchars"]
        max_bytes = self.config["tsd.core.max_name_bytes"]
        checks = [("metric name", metric)]
        for tagk, tagv in java_hashmap_order(pairs):
            checks += [(f"tag name with value [{echo(tagv)}]", tagk),
                       (f"tag value with key [{echo(tagk)}]", tagv)]
        for what, name in checks:
            size = len(name.encode("utf-8"))
            if size > max_bytes:
                raise BadRequestError(f'Invalid {what} ("{echo(name)}"): {size} bytes, more '
                                      f"than the {max_bytes} allowed (tsd.core.max_name_bytes)")
            validate_name(what, name, specials)


class _SeriesNumbers:
    """For blocks (numpy): each series key's number (below 2**31), and each hour row's key by
    ``number << 32 | base time``; kept together (a number means nothing without its key) until
    either passes ``MAX_TEMPLATES`` entries, then replaced whole."""

    def __init__(self) -> None:
        self.codes: dict[object, int] = {}
        self.keys: list[object] = []
        self.rows: dict[int, bytes] = {}
        # Request and line-protocol threads number new series at once: a number taken by
        # two keys would write one series' points in the other's rows.
        self._lock = threading.Lock()

    def full(self) -> bool:
        return len(self.codes) > MAX_TEMPLATES or len(self.rows) > MAX_TEMPLATES

    def number(self, series_of: Sequence[object]) -> None:
        """Give each new series key of ``series_of`` a number, in the order they come: a
        block's rows are then in the order of its series (their UIDs', for a collector's new
        series), which the merge's sort finds."""
        codes, keys = self.codes, self.keys
        with self._lock:
            for key in dict.fromkeys(series_of):
                if key not in codes:
                    codes[key] = len(keys)
                    keys.append(key)


AUTO_CREATE = {"metrics": "tsd.core.auto_create_metrics", "tagk": "tsd.core.auto_create_tagks",
               "tagv": "tsd.core.auto_create_tagvs"}


def _encode(timestamps: list[int], values: list[Value], wide_floats: bool
            ) -> tuple[list[int], list[bytes], list[bytes]]:
    """Each point's ``(base_time_s, qualifier, value_bytes)``: numpy for big batches; point by
    point below ``VECTOR_MIN_POINTS``, where numpy's fixed cost per call is the larger."""
    if len(values) >= VECTOR_MIN_POINTS:
        return encode_points(np.array(timestamps, dtype=np.int64), *_value_arrays(values),
                             wide_floats)
    return encode_cells(timestamps, values, wide_floats)


def _value_arrays(values: Sequence[Value]
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """``(ints, floats, is_float)`` of the values, as ``codec_bulk`` takes them."""
    as_array = np.array(values)
    if as_array.dtype == np.int64:  # integers only (the common case): no pass per point
        return as_array, as_array.astype(np.float64), np.zeros(len(values), dtype=bool)
    if as_array.dtype == np.float64 and set(map(type, values)) == {float}:  # floats only
        return np.zeros(len(values), dtype=np.int64), as_array, np.ones(len(values), dtype=bool)
    is_float = np.fromiter((isinstance(v, float) for v in values), bool, len(values))
    ints = np.array([0 if f else v for v, f in zip(values, is_float.tolist())], dtype=np.int64)
    return ints, np.array(values, dtype=np.float64), is_float


def _encode_value(value: Value, wide_floats: bool) -> tuple[int, bytes]:
    """``(flags, bytes)``: ``addPoint(double)`` for a float when ``wide_floats`` (HTTP)."""
    if wide_floats and isinstance(value, float):
        return codec.FLAG_FLOAT | 0x7, struct.pack(">d", value)
    return codec.encode_value(value)


def _compacted(cells: dict[bytes, bytes]) -> dict[bytes, bytes]:
    if len(cells) < 2:
        return cells
    compacted = codec.compact_cells((q[2:], v) for q, v in cells.items())
    return {b"t:" + compacted[0]: compacted[1]} if compacted else cells
