"""Annotations in the data table: get, sync (merge or replace), delete and range listings.

Where a note lives (``Annotation#getRowKey``, ``#getQualifier``)::

    series note  row = series row key at hour(start)   (salted like the series' data rows)
    global note  row = zero salt, zero metric UID, hour(start), no tags
    family t,    qualifier = 0x01 offset_s(2)   | 0x01 offset_ms(4)   (ms only if sub-second)
    value        = annotation_model.Note.storage_json()

Improvements over OpenTSDB 2.4 (issues #365, #377, #418, #457, #729; docs/annotations.md):
range scans include the last hour row, every annotation cell of a row is read (not the first
one N times), millisecond notes are found and listed, and listings filter on the start time
only, whatever the note's end time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from app.errors import BadRequestError, NoSuchUniqueId, TsdbError
from app.query.ast import Filter
from app.query.filters import build_filter, series_matches
from app.query.limits import NO_DEADLINE, Deadline
from app.storage import codec
from app.storage.base import Row
from app.tsdb import TSDB
from app.tsdb.annotation_model import (
    Note,
    NoteRequest,
    merge,
    note_from_storage,
    to_ms,
    to_s,
)
from app.tsdb.tsuid import parse_tsuid, tsuid_tags

log = logging.getLogger(__name__)

FAMILY = b"t"
COLUMN_PREFIX = b"t:"
HOUR_S = codec.MAX_TIMESPAN
CAS_ATTEMPTS = 3
# Above this many hour rows x series, listing a series' notes scans instead of fetching.
MAX_GETS = 2000
MAX_BASE_S = 0xFFFFFFFF - 0xFFFFFFFF % HOUR_S


class SaveConflictError(TsdbError):
    """The compare-and-set kept losing to concurrent writers (OpenTSDB's 500)."""

    code = 500


# --- where a note lives ----------------------------------------------------------------------


def storage_time(start: int) -> int:
    """The start used for the qualifier: a whole-second millisecond time counts as seconds,
    so ``1388450562000`` finds the note stored at ``1388450562`` (``getAnnotationNormalizeMs``)."""
    if start & codec.SECOND_MASK and start % 1000 == 0:
        return start // 1000
    return start


def tsuid_bytes(tsdb: TSDB, tsuid: str) -> bytes:
    """Validate a hex TSUID against the UID widths."""
    return parse_tsuid(tsdb.layout, tsuid)


def cell_of(tsdb: TSDB, tsuid: str, start: int) -> tuple[bytes, bytes]:
    """``(row_key, column)`` of the note of ``tsuid`` (``""``: global) starting at ``start``."""
    if start < 1:
        raise BadRequestError("The start timestamp has not been set")
    if start >= 1000 << 32:  # past what a 32-bit base time can hold, even as milliseconds
        raise BadRequestError(f"The start timestamp {start} is out of range")
    ts = storage_time(start)
    base_s = codec.base_time_s(ts)
    if tsuid:
        row = tsdb.layout.row_key_from_tsuid(tsuid_bytes(tsdb, tsuid), base_s)
    else:
        row = tsdb.layout.global_annotation_row(base_s)
    return row, COLUMN_PREFIX + codec.annotation_qualifier(ts)


def note_from_cell(layout: codec.RowKeyLayout, key: bytes, qualifier: bytes,
                   value: bytes) -> Note | None:
    """Parse one stored note; fill ``tsuid``/``startTime`` from the cell when the JSON lacks
    them (notes written by hand or by other tools). None when the value is not JSON."""
    try:
        note = note_from_storage(value)
    except ValueError:
        log.warning("skipping an unreadable annotation in row %s", key.hex())
        return None
    parts = layout.parse_row_key(key)
    if note.start_time < 1:
        note.start_time = codec.annotation_offset_ms(qualifier, parts.base_time_s)
        if note.start_time % 1000 == 0:
            note.start_time //= 1000
    if not note.tsuid and any(parts.metric_uid):
        note.tsuid = layout.tsuid(key).hex().upper()
    return note


def _annotation_cells(layout: codec.RowKeyLayout, rows: Iterable[tuple[bytes, Row]],
                      deadline: Deadline = NO_DEADLINE) -> Iterator[tuple[bytes, Note]]:
    """``(row_key, note)`` for every annotation cell of the rows, the request's deadline
    (and cancellation) checked first and every ``CHECK_EVERY_ROWS`` rows."""
    deadline.check()
    for count, (key, cells) in enumerate(rows, 1):
        if count % CHECK_EVERY_ROWS == 0:
            deadline.check()
        for column, value in cells.items():
            qualifier = column[len(COLUMN_PREFIX):]
            if column.startswith(COLUMN_PREFIX) and codec.is_annotation_qualifier(qualifier):
                note = note_from_cell(layout, key, qualifier, value)
                if note is not None:
                    yield key, note


# Rows read between checks of the request's deadline.
CHECK_EVERY_ROWS = 256


# --- one note --------------------------------------------------------------------------------


def get_note(tsdb: TSDB, tsuid: str, start: int) -> Note | None:
    """The note at exactly ``(tsuid, start)``; ``start`` in seconds or milliseconds."""
    row, column = cell_of(tsdb, tsuid, start)
    value = tsdb.data_table().row(row, [column]).get(column)
    if value is None:
        return None
    return note_from_cell(tsdb.layout, row, column[len(COLUMN_PREFIX):], value)


def sync_note(tsdb: TSDB, request: NoteRequest, overwrite: bool) -> Note:
    """``Annotation#syncToStorage``: create, merge (POST) or replace (PUT) one note.

    The caller checks ``request.changed`` first (no change is OpenTSDB's 304). The write is a
    compare-and-set against the bytes read, retried a few times when another writer got there
    first (OpenTSDB gives up at once with a 500).
    """
    note = request.note
    row, column = cell_of(tsdb, note.tsuid, note.start_time)
    table = tsdb.data_table()
    for _ in range(CAS_ATTEMPTS):
        stored_raw = table.row(row, [column]).get(column)
        result = note
        if stored_raw is not None:
            stored = note_from_cell(tsdb.layout, row, column[len(COLUMN_PREFIX):], stored_raw)
            if stored is not None:
                result = merge(request, stored, overwrite)
        if table.check_and_put(row, column, stored_raw, result.storage_json()):
            tsdb.plugins.publish_annotation(result.api_json())  # RTPublisher's seam
            return result
    raise SaveConflictError("Failed to save the Annotation to storage",
                            "This may be caused by another process modifying storage data")


def delete_note(tsdb: TSDB, tsuid: str, start: int) -> None:
    """Delete one note; nothing happens when there is none (OpenTSDB answers 204 either way)."""
    row, column = cell_of(tsdb, tsuid, start)
    tsdb.data_table().delete(row, [column])


# --- ranges ----------------------------------------------------------------------------------


def _hours(start_ms: int, end_ms: int) -> range:
    """Base times (s) of every hour row that can hold a note starting in [start, end]."""
    if start_ms < 0 or end_ms < start_ms:
        raise BadRequestError("The end timestamp cannot be less than the start timestamp")
    # Row keys hold 32-bit seconds; clamp before base_time_s reads >= 2**32 as milliseconds.
    first_s = codec.base_time_s(min(start_ms // 1000, MAX_BASE_S))
    last_s = codec.base_time_s(min(end_ms // 1000, MAX_BASE_S))
    return range(first_s, last_s + 1, HOUR_S)


def _in_range(notes: Iterable[Note], start_ms: int, end_ms: int) -> list[Note]:
    return [note for note in notes if start_ms <= note.start_ms <= end_ms]


def global_notes(tsdb: TSDB, start_ms: int, end_ms: int,
                 deadline: Deadline = NO_DEADLINE) -> list[Note]:
    """Global notes whose start lies in [start_ms, end_ms] (both inclusive), by start."""
    hours = _hours(start_ms, end_ms)
    layout = tsdb.layout
    rows = tsdb.data_table().scan(row_start=layout.global_annotation_row(hours[0]),
                                  row_stop=_global_stop(layout, hours[-1]), columns=[FAMILY])
    # Only the global rows themselves: a tagged key under the zero metric is not a global note.
    width = len(layout.global_annotation_row(0))
    notes = (note for key, note in _annotation_cells(layout, rows, deadline)
             if len(key) == width)
    return sorted(_in_range(notes, start_ms, end_ms), key=_order)


def _global_stop(layout: codec.RowKeyLayout, last_base_s: int) -> bytes:
    if last_base_s < MAX_BASE_S:
        return layout.global_annotation_row(last_base_s + HOUR_S)
    return bytes(layout.salt_width + layout.metric_width) + b"\xff" * 5


def tsuid_notes(tsdb: TSDB, tsuids: Sequence[str], start_ms: int, end_ms: int,
                deadline: Deadline = NO_DEADLINE) -> list[Note]:
    """Notes of the given series starting in [start_ms, end_ms], by start then TSUID.

    A series' hour rows are not contiguous (the base time sits between metric and tags), so
    short ranges fetch each hour row; long ones scan the metric's rows and keep the series'.
    """
    wanted = {tsuid_bytes(tsdb, tsuid) for tsuid in tsuids}
    hours = _hours(start_ms, end_ms)
    layout, table = tsdb.layout, tsdb.data_table()
    if len(hours) * len(wanted) <= MAX_GETS:
        keys = sorted(layout.row_key_from_tsuid(raw, base_s)
                      for raw in wanted for base_s in hours)
        rows: Iterable[tuple[bytes, Row]] = table.rows(keys, columns=[FAMILY])
    else:
        rows = (row for metric_uid in sorted({raw[:layout.metric_width] for raw in wanted})
                for row in _metric_scan(tsdb, metric_uid, hours)
                if layout.tsuid(row[0]) in wanted)
    notes = (note for _, note in _annotation_cells(layout, rows, deadline))
    return sorted(_in_range(notes, start_ms, end_ms), key=_order)


def _metric_scan(tsdb: TSDB, metric_uid: bytes, hours: range) -> Iterator[tuple[bytes, Row]]:
    """Every hour row of one metric in ``hours``, salt bucket by salt bucket."""
    table, layout = tsdb.data_table(), tsdb.layout
    for salt in layout.salt_prefixes():
        start, stop = layout.metric_scan_range(salt, metric_uid, hours[0], hours[-1])
        yield from table.scan(row_start=start, row_stop=stop, columns=[FAMILY])


def metric_notes(tsdb: TSDB, metric: str, filters: Sequence[Filter], start_ms: int,
                 end_ms: int, deadline: Deadline = NO_DEADLINE) -> list[Note]:
    """Notes of every series of ``metric`` matching ``filters`` (OpenTSDB tag filters),
    starting in [start_ms, end_ms], each with ``series`` set. Unknown metric or tag keys are
    OpenTSDB's 400s (``No such name for 'metrics': 'x'``)."""
    metric_uid = tsdb.metrics.get_id(metric)
    for spec in filters:
        tsdb.tagk.get_id(spec.tagk)
    tag_filters = [build_filter(spec) for spec in filters]
    names: dict[bytes, dict[str, str] | None] = {}
    notes: list[Note] = []
    rows = _metric_scan(tsdb, metric_uid, _hours(start_ms, end_ms))
    for key, note in _annotation_cells(tsdb.layout, rows, deadline):
        tsuid = tsdb.layout.tsuid(key)
        if tsuid not in names:
            names[tsuid] = _tag_names(tsdb, tsuid)
        tags = names[tsuid]
        if tags is not None and series_matches(tags, tag_filters, False):
            note.series = {"metric": metric, "tags": tags}
            notes.append(note)
    return sorted(_in_range(notes, start_ms, end_ms), key=_order)


def _tag_names(tsdb: TSDB, tsuid: bytes) -> dict[str, str] | None:
    """Tag names of a TSUID, or None when a UID has no name (a corrupt UID table)."""
    try:
        return tsuid_tags(tsdb, tsuid)
    except NoSuchUniqueId:
        return None


def series_tsuid(tsdb: TSDB, metric: str, tags: dict[str, str]) -> str:
    """The TSUID of one series named by metric and exact tags (names must have UIDs)."""
    pairs = [(tsdb.tagk.get_id(k), tsdb.tagv.get_id(v)) for k, v in tags.items()]
    key = tsdb.layout.row_key(tsdb.metrics.get_id(metric), 0, pairs)
    return tsdb.layout.tsuid(key).hex().upper()


def describe_series(tsdb: TSDB, notes: Iterable[Note]) -> None:
    """Fill ``note.series`` (metric and tag names) of series notes that lack it."""
    for note in notes:
        if note.tsuid and note.series is None:
            raw = tsuid_bytes(tsdb, note.tsuid)
            tags = _tag_names(tsdb, raw)
            try:
                metric = tsdb.metrics.get_name(raw[:tsdb.layout.metric_width])
            except NoSuchUniqueId:
                continue
            if tags is not None:
                note.series = {"metric": metric, "tags": tags}


MAX_LISTED = 100_000  # the most notes one listing may ask for (``limit``)


def listing_limit(text: str) -> int:
    """A listing's ``limit`` argument: an integer from 1 to :data:`MAX_LISTED`."""
    if not text.isdigit() or not 0 < int(text) <= MAX_LISTED:
        raise BadRequestError(f"Invalid limit: {text}",
                              f"limit must be an integer from 1 to {MAX_LISTED}")
    return int(text)


def listing(tsdb: TSDB, notes: Sequence[Note], start_ms: int, end_ms: int, text: str,
            limit: int) -> dict[str, Any]:
    """The answer of a note listing (``/api/annotation/list``, the UI's all-series view):
    the notes containing ``text`` (case-insensitive; all when empty), the first ``limit``
    of them with their series described, and how many there were."""
    if text:
        notes = [note for note in notes if note.matches_text(text)]
    kept = list(notes[:limit])
    describe_series(tsdb, kept)
    return {"start": start_ms, "end": end_ms, "total": len(notes),
            "truncated": len(notes) > limit,
            "annotations": [note.listing_json() for note in kept]}


def _order(note: Note) -> tuple[int, str]:
    return note.start_ms, note.tsuid


def delete_range(tsdb: TSDB, tsuid: str | None, start_ms: int, end_ms: int) -> int:
    """``Annotation#deleteRange``: delete the notes (of one series, or global when ``tsuid``
    is None) whose start lies in [start_ms, end_ms]; return how many were deleted."""
    if end_ms < 1:
        raise BadRequestError("The end timestamp has not been set")
    if tsuid is None:
        notes = global_notes(tsdb, start_ms, end_ms)
    else:
        notes = tsuid_notes(tsdb, [tsuid], start_ms, end_ms)
    for note in notes:
        delete_note(tsdb, note.tsuid, note.start_time)
    return len(notes)


# --- what /api/query needs -------------------------------------------------------------------


def global_annotations(tsdb: TSDB, start_ms: int, end_ms: int,
                       deadline: Deadline = NO_DEADLINE) -> list[dict[str, object]]:
    """``globalAnnotations`` of a query over [start_ms, end_ms]: by start, times in seconds."""
    return [note.query_json() for note in global_notes(tsdb, max(start_ms, 0), end_ms,
                                                       deadline)]


def filter_series_notes(notes: Iterable[dict[str, object] | Note], start_ms: int,
                        end_ms: int) -> list[dict[str, object]]:
    """A series' ``annotations`` for a query: notes starting in [start_ms, end_ms], by start,
    times in seconds, every field Grafana reads present. Accepts raw stored dicts too."""
    parsed = [note if isinstance(note, Note) else _from_dict(note) for note in notes]
    return [note.query_json() for note in sorted(_in_range(parsed, start_ms, end_ms),
                                                 key=_order)]


def _from_dict(data: dict[str, object]) -> Note:
    import json

    return note_from_storage(json.dumps(data).encode())


def query_note(layout: codec.RowKeyLayout, key: bytes, qualifier: bytes,
               value: bytes) -> dict[str, object] | None:
    """One annotation cell read by the query path, ready for the response (times in s)."""
    note = note_from_cell(layout, key, qualifier, value)
    return None if note is None else note.query_json()


# --- demo ------------------------------------------------------------------------------------


def write_demo_notes(tsdb: TSDB, end_s: int, demo: Iterable[tuple[int, str, str, bool]],
                     series_tsuid: str) -> int:
    """Write the demo notes ending at ``end_s``; series notes go on ``series_tsuid``."""
    count = 0
    for hours, description, text, on_series in demo:
        note = Note(tsuid=series_tsuid if on_series else "", start_time=end_s - hours * HOUR_S,
                    description=description, notes=text)
        sync_note(tsdb, NoteRequest(note, {"description", "notes"}), overwrite=True)
        count += 1
    return count


__all__ = [
    "Note", "NoteRequest", "SaveConflictError", "cell_of", "delete_note", "delete_range",
    "describe_series", "filter_series_notes", "get_note", "global_annotations", "global_notes",
    "metric_notes", "note_from_cell", "query_note", "series_tsuid", "storage_time", "sync_note",
    "to_ms", "to_s", "tsuid_notes", "write_demo_notes",
]
