"""Points on their way in: parsing of values and timestamps, and the columnar batch.

``/api/put`` and the line protocol parse their input into a :class:`PointBatch` (one entry
per input point, an error message for each rejected one); :class:`~app.tsdb.writer.PointWriter`
validates its series, resolves UIDs and stores the rest in bulk. Pure: no Flask, no storage.
"""

from __future__ import annotations

import math
import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from app.errors import BadRequestError, TsdbError
from app.jackson import java_hashmap_iteration

MAX_MS_TIMESTAMP = 9_999_999_999_999
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INTEGER_TEXT = re.compile(r"[+-]?\d+")
ECHO_CHARS = 256  # the most of one name an error message repeats back

Value = int | float
TagPairs = tuple[tuple[str, str], ...]


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
    """A positive integer (seconds or ms); 'Invalid timestamp' otherwise.

    A positive timestamp beyond OpenTSDB's range is accepted here: the writer rejects it
    with ``TSDB.addPoint``'s message, which names the point.
    """
    if isinstance(raw, bool) or raw is None:
        raise BadRequestError("Invalid timestamp")
    try:
        timestamp = int(raw)
    except (TypeError, ValueError, OverflowError):  # OverflowError: a JSON Infinity
        raise BadRequestError("Invalid timestamp") from None
    if timestamp <= 0:
        raise BadRequestError("Invalid timestamp")
    return timestamp


def point_head(raw: Any) -> tuple[Mapping[str, Any], str]:
    """The checks every put body's point starts with (``IncomingDataPoint``, histogram or
    not): an object, with a metric name. Returns the object and the metric."""
    if not isinstance(raw, Mapping):
        raise BadRequestError("Unable to parse the given JSON", "A data point must be an object")
    metric = raw.get("metric")
    if not metric or not isinstance(metric, str):
        raise BadRequestError("Metric name was empty")
    return raw, metric


def point_tags(raw: Mapping[str, Any]) -> Mapping[Any, Any]:
    """A point's tags: a non-empty object, or OpenTSDB's 'Missing tags'."""
    tags = raw.get("tags")
    if not tags or not isinstance(tags, Mapping):
        raise BadRequestError("Missing tags")
    return tags


def parse_point(raw: Any) -> DataPoint:
    """Validate one point of a put body, in OpenTSDB's order and with its messages."""
    raw, metric = point_head(raw)
    timestamp = parse_timestamp(raw.get("timestamp"))
    if raw.get("value") is None or raw.get("value") == "":
        raise BadRequestError("Empty value")
    tags = point_tags(raw)
    value = parse_value(raw["value"])
    return DataPoint(metric, timestamp, value, {str(k): str(v) for k, v in tags.items()})


def add_json_points(batch: PointBatch, raws: list[Any],
                    known: Container[object] = ()) -> None:
    """The points of a put body into ``batch``, in order: :func:`parse_point`'s checks and
    messages for each (a bad one is rejected, the others are kept).

    ``known``: series keys ``(metric, tag pairs)`` already validated (the writer's), whose
    names need no type check: such a key compares equal only to a key of the same strings.
    A body of known series' points with integer timestamps and values in range is taken
    whole (:func:`_add_known_points`); otherwise the common point (a string metric, a
    positive integer timestamp, a finite number, string tags) is taken in one loop with no
    call per point, and anything else goes through :func:`add_json_point`.
    """
    if _add_known_points(batch, raws, known):
        return
    series, series_of, timestamps = batch.series, batch.series_of, batch.timestamps
    values, errors = batch.values, batch.errors
    for raw in raws:
        if type(raw) is dict:
            metric, timestamp, value, tags = (raw.get("metric"), raw.get("timestamp"),
                                              raw.get("value"), raw.get("tags"))
            if (type(timestamp) is int and timestamp > 0 and type(tags) is dict and tags
                    and (type(value) is int and LONG_MIN <= value <= LONG_MAX
                         or type(value) is float and math.isfinite(value))):
                key = (metric, tuple(tags.items()))
                try:
                    in_batch = key in series
                    seen = in_batch or key in known
                except TypeError:  # an unhashable tag value: the slow path says what is wrong
                    in_batch = seen = False
                if seen or (type(metric) is str and metric and all(
                        type(k) is str and type(v) is str for k, v in key[1])):
                    if not in_batch:
                        series[key] = key  # type: ignore[assignment]  # (metric, tags), checked
                    series_of.append(key)
                    timestamps.append(timestamp)
                    values.append(value)
                    errors.append(None)
                    continue
        add_json_point(batch, raw)


_FIELDS = itemgetter("metric", "timestamp", "value", "tags")


def _add_known_points(batch: PointBatch, raws: list[Any], known: Container[object]) -> bool:
    """All of ``raws`` into ``batch`` when every point is an object of a known series with a
    positive integer timestamp and a value within a long (finite, if a float), checked a
    field at a time over the whole body (``map`` and ``set``: loops in C, no Python step per
    point). False, with nothing added, when any point is not so."""
    if not raws or set(map(type, raws)) != {dict}:
        return False
    try:
        metrics, timestamps, values, tags = zip(*map(_FIELDS, raws))
    except KeyError:  # a field missing: the per-point path says which
        return False
    if set(map(type, timestamps)) != {int} or min(timestamps) <= 0 \
            or set(map(type, tags)) != {dict} or not all(tags):
        return False
    value_types = set(map(type, values))
    # The range first: a NaN or an infinity fails it or isfinite, a huge int never reaches it.
    if not value_types <= {int, float} or min(values) < LONG_MIN or max(values) > LONG_MAX \
            or float in value_types and not all(map(math.isfinite, values)):
        return False
    keys = list(zip(metrics, map(tuple, map(dict.items, tags))))
    series = batch.series
    try:
        if not all(map(known.__contains__, keys)):
            return False
    except TypeError:  # an unhashable tag value: the per-point path says what is wrong
        return False
    series.update(zip(keys, keys))  # a known key is its series' (metric, tag pairs)
    batch.series_of.extend(keys)
    batch.timestamps.extend(timestamps)
    batch.values.extend(values)
    batch.errors.extend([None] * len(keys))
    return True


def add_json_point(batch: PointBatch, raw: Any) -> None:
    """One point of a put body into ``batch``: :func:`parse_point`'s checks and messages."""
    try:
        point = parse_point(raw)
    except TsdbError as exc:
        batch.reject(exc)
        return
    pairs = tuple(point.tags.items())
    batch.add((point.metric, pairs), point.metric, pairs, point.timestamp, point.value)


@dataclass
class PointBatch:
    """The points of one request or block of lines, in input order.

    ``series_of[i]`` names point i's series: a key into ``series`` (any hashable text the
    parser finds cheap, e.g. the line's metric and tag words), whose value is the metric and
    the tags in input order. A point with ``errors[i]`` set is rejected and stores nothing.

    :param wide_floats: floats take 8 bytes (HTTP ``/api/put``); else 4 where they fit
        (the telnet ``put`` and ``pytsd import``), as OpenTSDB writes each path.
    """

    wide_floats: bool = False
    series: dict[Any, tuple[str, TagPairs]] = field(default_factory=dict)
    series_of: list[Any] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    errors: list[TsdbError | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.errors)

    def add(self, key: Any, metric: str, tags: TagPairs, timestamp: int, value: Value) -> None:
        if key not in self.series:
            self.series[key] = (metric, tags)
        self.series_of.append(key)
        self.timestamps.append(timestamp)
        self.values.append(value)
        self.errors.append(None)

    def reject(self, error: TsdbError) -> None:
        self.series_of.append(None)
        self.timestamps.append(0)
        self.values.append(0)
        self.errors.append(error)

    @classmethod
    def of(cls, points: Sequence[DataPoint], wide_floats: bool = False) -> PointBatch:
        batch = cls(wide_floats)
        for point in points:
            tags = tuple(point.tags.items())
            batch.add((point.metric, tags), point.metric, tags, point.timestamp, point.value)
        return batch


# --- OpenTSDB's message texts: Java's toString of what it names ---------------------------


def java_hashmap_order(pairs: TagPairs) -> list[tuple[str, str]]:
    """The tags in the order a Java ``HashMap`` filled in this order iterates them
    (OpenTSDB's messages list tags, and check them, in this order)."""
    unique = dict(pairs)
    return [(key, unique[key]) for key in java_hashmap_iteration(unique)]


def java_hashmap_text(pairs: TagPairs) -> str:
    """``HashMap.toString()`` of tags inserted in this order: ``{k1=v1, k2=v2}``."""
    return "{" + ", ".join(f"{echo(k)}={echo(v)}" for k, v in java_hashmap_order(pairs)) + "}"


def java_bytes_text(raw: bytes) -> str:
    """``Arrays.toString(byte[])``: signed bytes, ``[63, -8, 0, 0]``."""
    return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in raw) + "]"


def echo(name: str) -> str:
    """A name as an error message repeats it: at most ``ECHO_CHARS`` characters."""
    if len(name) <= ECHO_CHARS:
        return name
    return f"{name[:ECHO_CHARS]}... ({len(name)} characters)"
