"""``/api/query`` results as OpenTSDB's exact JSON (``HttpJsonSerializer#formatQueryAsyncV1``).

One object per output series, keys in this order (optional ones only when enabled)::

    {"metric": str, "tags": {tagk: tagv}, "aggregateTags": [tagk],
     "query": {...},                  # show_query: the sub-query echo, with "index"
     "tsuids": [hex],                 # show_tsuids: sorted
     "annotations": [...],            # unless no_annotations, when the series has any
     "globalAnnotations": [...],      # global_annotations, unless no_annotations
     "dps": {"<ts>": v, ...} | [[ts, v], ...],   # arrays: the ?arrays flag
     "stats": {...}}                  # show_stats
    ... then {"statsSummary": {...}} last, with show_summary.

``dps`` keeps only points with ``start <= ts <= end``; ``ts`` is seconds (``ts_ms // 1000``,
so several points in one second repeat a key, as in OpenTSDB) unless ``ms_resolution``.
Values print as integers when the group is integer, else like Java's ``Double.toString``
(``2.5``, ``301.0``, ``9.349986906415408E11``, ``5.0E-4``); NaN prints as the string
``"NaN"`` (Jackson's quoting), or ``null`` under fill policy ``null``.

The ``dps`` text is pre-rendered with numpy and orjson (it can hold millions of points), so
results are written with :func:`dumps_opentsdb`, not Flask's JSON provider. orjson prints a
double exactly as Python's ``repr`` does (shortest round-trip digits, positional below 1e16),
so one C call renders a whole series' values and only the few values Java prints differently
(``>= 1e7``, ``< 1e-3``, NaN) are patched; the timestamp keys of a grid that many series share
are formatted once per response (``KeyCache``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from app.engine.model import BoolArray, Float64Array, GroupResult, Int64Array
from app.jackson import java_double
from app.query.ast import Query, RateOptions, SubQuery
from app.query.limits import NO_DEADLINE, Deadline

_SECOND_MASK = 0xFFFFFFFF00000000
# OpenTSDB 2.4.1 prints startTime before endTime (checked against it by tests/differential)
_ANNOTATION_KEYS = ("tsuid", "description", "notes", "custom", "startTime", "endTime")


class RawJson:
    """JSON text that :func:`dumps_opentsdb` writes verbatim."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"RawJson({self.text[:60]!r})"




def _sci_from_positional(text: str) -> str:
    """Python's positional repr of 1e7 <= |x| < 1e16 (``12345678.9``) → ``1.23456789E7``."""
    sign, body = ("-", text[1:]) if text[0] == "-" else ("", text)
    whole, _, frac = body.partition(".")
    digits = (whole + frac).rstrip("0")
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{len(whole) - 1}"


def _format_values(values: Float64Array, is_int: bool, null_for_nan: bool,
                   int_mask: BoolArray | None = None,
                   long_values: Int64Array | None = None) -> list[str]:
    """Each value's JSON text; ``int_mask`` (per point) overrides ``is_int`` (per series)."""
    if int_mask is not None and int_mask.size and int_mask.any() and not int_mask.all():
        texts = _format_values(values, False, null_for_nan)
        ints = _int_texts(values, long_values)
        for i in np.flatnonzero(int_mask).tolist():
            texts[i] = ints[i]
        return texts
    if int_mask is not None and int_mask.size:
        is_int = bool(int_mask.all())
    nan_mask = np.isnan(values)
    if is_int:
        texts = _int_texts(values, long_values)
    else:
        texts = _c_texts(values)
        magnitude = np.abs(values)
        with np.errstate(invalid="ignore"):
            big = (magnitude >= 1e7) & (magnitude < 1e16)
            odd = ~np.isfinite(values) | (magnitude >= 1e16) | ((magnitude < 1e-3) & (values != 0))
        if big.all():
            texts = list(map(_sci_from_positional, texts))
        else:
            for i in np.flatnonzero(big).tolist():
                texts[i] = _sci_from_positional(texts[i])
        for i in np.flatnonzero(odd & ~nan_mask).tolist():
            texts[i] = java_double(float(values[i]))
    if nan_mask.any():
        nan_text = "null" if null_for_nan else '"NaN"'
        for i in np.flatnonzero(nan_mask).tolist():
            texts[i] = nan_text
    return texts


def _c_texts(numbers: Float64Array | Int64Array) -> list[str]:
    """Each number as orjson prints it (a double: like ``repr``; NaN and infinities: null),
    split out of one C-rendered JSON array."""
    if numbers.size == 0:
        return []
    rendered = orjson.dumps(np.ascontiguousarray(numbers), option=orjson.OPT_SERIALIZE_NUMPY)
    return rendered[1:-1].decode().split(",")


def _int_texts(values: Float64Array, long_values: Int64Array | None) -> list[str]:
    """Integers as Java longs print them; exact 64-bit values when the engine kept them."""
    if long_values is None:
        long_values = np.where(np.isnan(values), 0, values).astype(np.int64)
    return _c_texts(np.asarray(long_values, dtype=np.int64))


class KeyCache:
    """The ``dps`` keys of each distinct timestamp grid of one response, formatted once:
    the series of a grouped, downsampled query share one grid."""

    def __init__(self) -> None:
        self._keys: dict[bytes, list[str]] = {}

    def keys(self, stamps: Int64Array) -> list[str]:
        raw = stamps.tobytes()
        found = self._keys.get(raw)
        if found is None:
            found = self._keys[raw] = _c_texts(stamps)
        return found


def _interleave(keys: list[str], texts: list[str], first: str, middle: str, between: str,
                last: str) -> str:
    """``first k0 middle v0 between k1 middle v1 ... last`` with one C-level join."""
    count = len(keys)
    parts = [between] * (4 * count)
    parts[0] = first
    parts[1::4] = keys
    parts[2::4] = [middle] * count
    parts[3::4] = texts
    parts.append(last)
    return "".join(parts)


def render_dps(ts_ms: Int64Array, values: Float64Array, is_int: bool, *, start_ms: int,
               end_ms: int, ms_resolution: bool = False, arrays: bool = False,
               null_for_nan: bool = False, int_mask: BoolArray | None = None,
               long_values: Int64Array | None = None, key_cache: KeyCache | None = None) -> str:
    """The ``dps`` JSON text for one series."""
    ts_ms = np.asarray(ts_ms, dtype=np.int64)
    values = np.asarray(values, dtype=np.float64)
    keep = (ts_ms >= start_ms) & (ts_ms <= end_ms)
    if not keep.all():
        ts_ms, values = ts_ms[keep], values[keep]
        int_mask = int_mask[keep] if int_mask is not None else None
        long_values = long_values[keep] if long_values is not None else None
    if ms_resolution:
        stamps = ts_ms
    else:  # Java's long division truncates toward zero
        stamps = np.where(ts_ms < 0, -(-ts_ms // 1000), ts_ms // 1000)
    keys = (key_cache or KeyCache()).keys(np.ascontiguousarray(stamps, dtype=np.int64))
    texts = _format_values(values, is_int, null_for_nan, int_mask, long_values)
    if not keys:
        return "[]" if arrays else "{}"
    if arrays:
        return _interleave(keys, texts, "[[", ",", "],[", "]]")
    return _interleave(keys, texts, '{"', '":', ',"', "}")


def _start_ms(note: Mapping[str, Any]) -> int:
    start = int(note.get("startTime") or 0)
    return start * 1000 if start & _SECOND_MASK == 0 else start


def annotations_json(notes: Iterable[Mapping[str, Any]], start_ms: int,
                     end_ms: int) -> list[dict[str, Any]]:
    """Notes starting within [start, end], sorted by start, keys in OpenTSDB's order."""
    kept = [note for note in notes if start_ms <= _start_ms(note) <= end_ms]
    kept.sort(key=_start_ms)
    result = []
    for note in kept:
        ordered = {key: note[key] for key in _ANNOTATION_KEYS
                   if key in note and note[key] is not None}
        ordered.update((k, v) for k, v in note.items() if k not in ordered and v is not None)
        result.append(ordered)
    return result


def _rate_options_json(options: RateOptions) -> dict[str, Any]:
    return {"counter": options.counter, "counterMax": options.counter_max,
            "resetValue": options.reset_value, "dropResets": options.drop_resets}


def query_echo(sub: SubQuery) -> dict[str, Any]:
    """The sub-query as OpenTSDB's Jackson prints it under ``"query"``."""
    return {
        "aggregator": sub.aggregator,
        "metric": sub.metric,
        "tsuids": list(sub.tsuids) or None,
        "downsample": sub.downsample.text if sub.downsample else None,
        "rate": sub.rate,
        "filters": [{"tagk": f.tagk, "filter": f.filter, "group_by": f.group_by,
                     "type": f.type} for f in sub.filters],
        "explicitTags": sub.explicit_tags,
        "percentiles": list(sub.percentiles) or None,
        "index": sub.index,
        "rateOptions": _rate_options_json(sub.rate_options)
        if sub.rate_options.given or sub.rate_options != RateOptions() else None,
        "tags": {f.tagk: f"{f.type}({f.filter})" for f in sub.filters if f.group_by},
        "useFuzzyFilter": True,
        "preAggregate": sub.pre_aggregate,
        "rollupUsage": sub.rollup_usage,
        "rollupTable": "raw",
        "histogramQuery": bool(sub.percentiles) or sub.show_histogram_buckets,
        "showHistogramBuckets": sub.show_histogram_buckets,
        "useMultiGets": True,
    }


def stats_summary(summary: Mapping[str, Any],
                  per_query: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """The last array element with ``show_summary``: totals plus ``queryIdx_NN`` maps."""
    body = dict(summary)
    for index, stats in enumerate(per_query):
        body[f"queryIdx_{index:02d}"] = dict(stats)
    return {"statsSummary": body}


def serialize_results(query: Query, results: list[GroupResult], *,
                      global_annotations: Sequence[Mapping[str, Any]] = (),
                      stats: Mapping[int, Mapping[str, Any]] | None = None,
                      summary: Mapping[str, Any] | None = None,
                      deadline: Deadline = NO_DEADLINE) -> list[dict[str, Any]]:
    """The response array; write it with :func:`dumps_opentsdb`. ``deadline``: the
    request's budget, checked per series rendered.

    ``stats`` maps a sub-query index to its statistics (``show_stats``); ``summary`` is the
    already built :func:`stats_summary` element appended with ``show_summary``.
    """
    subs = {sub.index: sub for sub in query.queries}
    show_globals = query.global_annotations and not query.no_annotations
    globals_json = annotations_json(global_annotations, query.start_ms, query.end_ms) \
        if show_globals else []
    output: list[dict[str, Any]] = []
    key_cache = KeyCache()
    for result in results:
        deadline.check(result.query_index)
        sub = subs.get(result.query_index)
        series: dict[str, Any] = {"metric": result.metric, "tags": dict(result.tags),
                                  "aggregateTags": list(result.aggregate_tags)}
        if query.show_query and sub is not None:
            series["query"] = query_echo(sub)
        if query.show_tsuids:
            series["tsuids"] = sorted(result.tsuids)
        if not query.no_annotations and (result.annotations or result.show_empty_annotations):
            series["annotations"] = annotations_json(result.annotations, query.start_ms,
                                                     query.end_ms)
        if globals_json:
            series["globalAnnotations"] = globals_json
        null_for_nan = bool(sub and sub.downsample and sub.downsample.fill == "null")
        series["dps"] = RawJson(render_dps(
            result.ts_ms, result.values, result.is_int, start_ms=query.start_ms,
            end_ms=query.end_ms, ms_resolution=query.ms_resolution, arrays=query.arrays,
            null_for_nan=null_for_nan or result.json_null, int_mask=result.int_mask,
            long_values=result.long_values, key_cache=key_cache))
        if query.show_stats and stats is not None and result.query_index in stats:
            series["stats"] = dict(stats[result.query_index])
        output.append(series)
    if query.show_summary and summary is not None:
        output.append(dict(summary))
    return output


def dumps_opentsdb(obj: Any) -> str:
    """Compact JSON like Jackson's: Java doubles, quoted NaN, :class:`RawJson` verbatim."""
    parts: list[str] = []
    _write(obj, parts)
    return "".join(parts)


def _write(obj: Any, parts: list[str]) -> None:
    if isinstance(obj, RawJson):
        parts.append(obj.text)
    elif isinstance(obj, str):
        parts.append(json.dumps(obj, ensure_ascii=False))
    elif obj is None or isinstance(obj, bool):
        parts.append("null" if obj is None else "true" if obj else "false")
    elif isinstance(obj, int | np.integer):
        parts.append(str(int(obj)))
    elif isinstance(obj, float | np.floating):
        parts.append(java_double(float(obj)))
    elif isinstance(obj, Mapping):
        parts.append("{")
        for i, (key, value) in enumerate(obj.items()):
            parts.append("," if i else "")
            parts.append(json.dumps(str(key), ensure_ascii=False) + ":")
            _write(value, parts)
        parts.append("}")
    elif isinstance(obj, list | tuple | np.ndarray):
        parts.append("[")
        for i, value in enumerate(obj):
            parts.append("," if i else "")
            _write(value, parts)
        parts.append("]")
    else:
        raise TypeError(f"Cannot serialise {type(obj).__name__} as JSON")
