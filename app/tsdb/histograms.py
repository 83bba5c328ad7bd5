"""Histogram points in and out: ``/api/histogram`` and telnet ``histogram`` parsing, their
storage (``TSDB#addHistogramPoint``) and the read of a histogram sub-query's cells.

A point's value is validated by decoding it and stored re-encoded with its codec id in front,
as OpenTSDB does; the cell is always a put (never an append, never compacted). The series is
checked and its UIDs resolved by :meth:`PointWriter.row_template`, as for numeric points.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from app.engine.histogram import HistogramSeries, run_histogram_subquery
from app.engine.model import GroupResult
from app.errors import BadRequestError, StorageError, TsdbError
from app.query.ast import SubQuery
from app.storage.codec_histogram import (
    Bounds,
    HistogramCodecError,
    HistogramCodecs,
    SimpleHistogram,
    encode_simple,
    float_order,
    histogram_qualifier,
    histogram_time_ms,
    is_histogram_qualifier,
    to_float32,
)
from app.tsdb.points import (
    MAX_MS_TIMESTAMP,
    TagPairs,
    echo,
    java_bytes_text,
    java_hashmap_text,
    point_head,
    point_tags,
)
from app.tsdb.read.decode import DATA_PREFIX
from app.tsdb.read.plan import plan_read
from app.tsdb.read.rows import RowReader
from app.tsdb.writer import PointWriter

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
MAX_BUCKETS = 32767
DISABLED = ("Histogram storage has not been enabled. Check the "
            "'tsd.core.histograms.config' configuration.")


@dataclass(frozen=True)
class HistogramPoint:
    """A parsed histogram point: ``raw`` is the stored value (codec id first)."""

    metric: str
    timestamp: int
    raw: bytes
    tags: TagPairs


class StoreFailed(BadRequestError):
    """Raised after parsing, where OpenTSDB's telnet ``histogram`` fails its write's
    callback: it answers ``histogram: HBase error: <message>`` whatever the cause."""


# --- HTTP: HistogramPojo ------------------------------------------------------------------


def parse_json_histogram(raw: Any, codecs: HistogramCodecs) -> HistogramPoint:
    """``HistogramPojo#validate`` then the decode and re-encode of
    ``PutDataPointRpc#processDataPoint``, with their messages."""
    raw, metric = point_head(raw)
    timestamp = _json_long(raw.get("timestamp"))
    if timestamp is None or timestamp <= 0:
        raise BadRequestError("Invalid timestamp")
    tags = point_tags(raw)
    value, buckets = raw.get("value"), raw.get("buckets")
    if value is None or value == "":
        if not buckets or not isinstance(buckets, Mapping):
            raise BadRequestError("Histogram buckets cannot be null or empty if 'value' is empty.")
        histogram = _from_buckets(buckets, raw, codecs)
    else:
        codec_id = _json_long(raw.get("id"))
        codec_id = 0 if codec_id is None else codec_id
        if not 0 <= codec_id <= 255:
            raise BadRequestError("Invalid type. Must be from 0 to 255.")
        histogram = _decode_client_bytes(str(value), codec_id, codecs)
    pairs = tuple((str(k), str(v)) for k, v in tags.items())
    return HistogramPoint(metric, timestamp, encode_simple(histogram), pairs)


def _json_long(raw: Any) -> int | None:
    """A JSON number (or numeric text) as Jackson reads a Java long; None when absent."""
    if raw is None or isinstance(raw, bool):
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError, OverflowError):
        value = LONG_MAX + 1
    if not -LONG_MAX - 1 <= value <= LONG_MAX:
        raise BadRequestError("Unable to parse the given JSON",
                              f"Not a long: {echo(str(raw))}")
    return value


def _from_buckets(buckets: Mapping[Any, Any], raw: Mapping[str, Any],
                  codecs: HistogramCodecs) -> SimpleHistogram:
    """``HistogramPojo#toSimpleHistogram``: ``"lower,upper": count`` entries."""
    if len(buckets) > MAX_BUCKETS:  # the count is a Java short: OpenTSDB would store garbage
        raise BadRequestError(f"Too many histogram buckets: {len(buckets)} (at most "
                              f"{MAX_BUCKETS})")
    histogram = SimpleHistogram(_simple_id(codecs))
    histogram.overflow = _json_long(raw.get("overflow")) or 0
    histogram.underflow = _json_long(raw.get("underflow")) or 0
    for key, count in buckets.items():
        order, bounds = _bucket_key(str(key))
        histogram.buckets[order] = (bounds, _json_long(count) or 0)
    return histogram


@lru_cache(maxsize=4096)  # clients send the same bucket layout point after point
def _bucket_key(key: str) -> tuple[tuple[int, int], Bounds]:
    """``"lower,upper"`` → (the bucket's order key, its float bounds)."""
    bounds = [b for b in key.split(",") if b]
    if len(bounds) != 2:
        raise BadRequestError(f"Unable to parse bucket bounds: {echo(key)}")
    lower, upper = _java_float(bounds[0]), _java_float(bounds[1])
    return (float_order(lower), float_order(upper)), (lower, upper)


def _java_float(text: str) -> float:
    """``Float.parseFloat``; OpenTSDB's HTTP put reports its failure as an unparsable value."""
    try:
        return to_float32(float(text.strip().rstrip("fFdD")))
    except ValueError:
        raise BadRequestError("Unable to parse value to a number") from None


def _simple_id(codecs: HistogramCodecs) -> int:
    try:
        return codecs.simple_id()
    except HistogramCodecError as exc:
        raise BadRequestError(str(exc)) from None


def _decode_client_bytes(value: str, codec_id: int, codecs: HistogramCodecs) -> SimpleHistogram:
    try:
        raw = base64.b64decode(value + "=" * (-len(value) % 4))
    except (binascii.Error, ValueError):
        raise BadRequestError(f"Unable to decode the base64 value: {echo(value)}") from None
    try:
        return codecs.decode(raw, codec_id, includes_id=False)
    except HistogramCodecError as exc:
        raise BadRequestError(str(exc)) from None


# --- telnet: histogram <metric> <timestamp> [<id> <base64> | <buckets>] <tags> ----------------


def parse_telnet_histogram(words: Sequence[str], codecs: HistogramCodecs) -> HistogramPoint:
    """``HistogramDataPointRpc#importDataPoint``; what it fails before its write raises
    :class:`BadRequestError` (or the line parser's ``InvalidValue``), what fails in its write's
    callback :class:`StoreFailed`."""
    from app.lineproto.parse import parse_long, parse_tags

    if not codecs.enabled:
        raise BadRequestError(DISABLED)
    if len(words) < 5:
        raise BadRequestError(f"not enough arguments (need least 5, got {len(words) - 1})")
    metric = words[1]
    timestamp = parse_long(words[2].replace(".", ""))
    if timestamp <= 0:
        raise BadRequestError(f"invalid timestamp: {timestamp}")
    codec_id = _java_int(words[3])
    if codec_id is None:
        value, first_tag = words[3], 4
        codec_id = _simple_id(codecs)
    else:
        value, first_tag = words[4], 5
    tags = parse_tags([w for w in words[first_tag:] if w])
    try:
        if first_tag == 5:
            histogram = codecs.decode(base64.b64decode(value + "=" * (-len(value) % 4)),
                                      codec_id, includes_id=False)
        else:
            histogram = _parse_buckets(value, codec_id)
    except (HistogramCodecError, binascii.Error, ValueError) as exc:
        raise StoreFailed(str(exc)) from None
    return HistogramPoint(metric, timestamp, encode_simple(histogram), tags)


def _java_int(text: str) -> int | None:
    """``Integer.parseInt``, None where it would throw."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


def _parse_buckets(text: str, codec_id: int) -> SimpleHistogram:
    """``u=0:o=1:0,1=42:1,5=24``: underflow, overflow and ``lower,upper=count`` buckets."""
    histogram = SimpleHistogram(codec_id)
    for bucket in (b for b in text.split(":") if b):
        kv = [part for part in bucket.split("=") if part]
        if len(kv) != 2:
            raise HistogramCodecError(f"Improperly formatted bucket: {bucket}")
        key = kv[0].lower()
        if key in ("u", "o"):
            setattr(histogram, "underflow" if key == "u" else "overflow", _java_long(kv[1]))
            continue
        bounds = [b for b in key.split(",") if b]
        if len(bounds) != 2:
            raise HistogramCodecError(f"Improperly formatted bounds: {bucket}")
        histogram.add_bucket(_float_text(bounds[0]), _float_text(bounds[1]), _java_long(kv[1]))
    return histogram


def _java_long(text: str) -> int:
    """``Long.parseLong`` (its message when it is not one)."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if digits and digits.isascii() and digits.isdigit() and -(2**63) <= int(text) < 2**63:
        return int(text)
    raise HistogramCodecError(f'For input string: "{text}"')


def _float_text(text: str) -> float:
    try:
        return to_float32(float(text.strip().rstrip("fFdD")))
    except ValueError:
        raise HistogramCodecError(f'For input string: "{text}"') from None


# --- storing -----------------------------------------------------------------------------


def write_histograms(writer: PointWriter, points: Sequence[HistogramPoint]
                     ) -> list[TsdbError | None]:
    """Store the points (one put of their cells); an error or None per point, in order.

    A storage failure raises (the whole request fails), as for numeric points.
    """
    errors: list[TsdbError | None] = []
    rows: dict[bytes, dict[bytes, bytes]] = {}
    templates: dict[tuple[str, TagPairs], bytes] = {}  # each series checked once per call
    for point in points:
        try:
            row, qualifier = _cell(writer, point, templates)
        except StorageError:
            raise
        except TsdbError as exc:
            errors.append(exc)
            continue
        rows.setdefault(row, {})[DATA_PREFIX + qualifier] = point.raw
        errors.append(None)
    if rows:
        writer.tsdb.data_table().put_many(sorted(rows.items()))
    return errors


def _cell(writer: PointWriter, point: HistogramPoint,
          templates: dict[tuple[str, TagPairs], bytes]) -> tuple[bytes, bytes]:
    """``TSDB#addHistogramPoint``: the timestamp and series checks, then row and qualifier."""
    if point.timestamp > MAX_MS_TIMESTAMP:
        raise BadRequestError(f"bad timestamp={point.timestamp} when trying to add value="
                              f"{java_bytes_text(point.raw)}/0 to metric={echo(point.metric)}, "
                              f"tags={java_hashmap_text(point.tags)}")
    series = (point.metric, point.tags)
    template = templates.get(series)
    if template is None:
        template = templates[series] = writer.row_template(point.metric, dict(point.tags),
                                                           point.tags)
    base_s, qualifier = histogram_qualifier(point.timestamp)
    return writer.row_for(template, base_s), qualifier


# --- reading -----------------------------------------------------------------------------


class HistogramReader(RowReader):
    """Reads only the histogram cells of a sub-query's series (``TsdbQuery#findHistogramSpans``)."""

    def read_histograms(self, sub: SubQuery, start_ms: int, end_ms: int
                        ) -> list[HistogramSeries]:
        codecs: HistogramCodecs = self.tsdb.histogram_codecs
        # Stored cells (the hour cache holds decoded numeric points only), raw rows.
        plan = self.read_plan = plan_read(self.tsdb, sub, start_ms, end_ms, keeps_cells=True,
                                          rollups=False)
        kept = self.matching(self.row_groups(plan.first_s, plan.last_s))
        out = []
        for group, tags in kept:
            by_time: dict[int, SimpleHistogram] = {}
            for key, cells in group.rows:
                base_s = self.base_time(key)
                assert isinstance(cells, dict)  # stored cells: its plan keeps cells (above)
                for column, value in cells.items():
                    qualifier = column[len(DATA_PREFIX):]
                    if not column.startswith(DATA_PREFIX) or not is_histogram_qualifier(
                            qualifier):
                        continue
                    try:
                        by_time[histogram_time_ms(base_s, qualifier)] = codecs.decode(value)
                    except HistogramCodecError as exc:
                        log.warning("skipping a histogram cell it cannot decode: %s", exc)
            if not by_time:
                continue
            self.stats.points += len(by_time)
            tsuid = group.row_order[self.layout.salt_width:].hex().upper()
            out.append(HistogramSeries(tsuid=tsuid, tags=tags, points=sorted(by_time.items()),
                                       row_order=group.row_order,
                                       tag_uids=dict(zip(tags, group.tag_uids))))
        self.stats.series += len(out)
        return out


def run_histogram_query(tsdb: Any, sub: SubQuery, start_ms: int, end_ms: int,
                        reader: HistogramReader, timezone: str) -> tuple[list[GroupResult], float]:
    """The sub-query's groups, and the milliseconds its read took."""
    started = time.perf_counter()
    series = reader.read_histograms(sub, start_ms, end_ms)
    read_ms = (time.perf_counter() - started) * 1000
    metric = sub.metric or (tsdb.metrics.get_name(bytes.fromhex(series[0].tsuid)[
        :tsdb.layout.metric_width]) if series else "")
    return run_histogram_subquery(sub, metric, series, start_ms, end_ms, timezone), read_ms
