"""The Graphite-style functions of ``/api/query/gexp`` over the engine's group results.

OpenTSDB 2.4 registers these names (``ExpressionFactory``); each takes the series of its
series arguments (in order) and its plain parameters. Error texts are OpenTSDB's. Where
OpenTSDB 2.4.1 is broken pytsd does what the function is meant to do (docs/differences.md):
``alias`` keeps the sign of values (OpenTSDB takes their absolute value), ``timeShift`` accepts
its documented ``'<n><unit>'`` parameter (OpenTSDB reads the closing quote into the unit and
always fails) and shifts float series too, and the ``*Series`` functions pair points by
timestamp (OpenTSDB pairs them by position).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from app.engine.model import BoolArray, Float64Array, GroupResult
from app.errors import BadRequestError
from app.query.limits import NO_DEADLINE, Deadline

INT_MAX = 2**31 - 1


class UidOrder(Protocol):
    """The storage UIDs of names: OpenTSDB orders series sets and picks names by them."""

    def metric(self, name: str) -> bytes: ...

    def tagk(self, name: str) -> bytes: ...

    def tagv(self, name: str) -> bytes: ...


class NameOrder:
    """Orders by the names themselves (when no UID table is at hand)."""

    def metric(self, name: str) -> bytes:
        return name.encode()

    def tagk(self, name: str) -> bytes:
        return name.encode()

    def tagv(self, name: str) -> bytes:
        return name.encode()


@dataclass(frozen=True)
class GexpContext:
    start_ms: int
    end_ms: int
    uids: UidOrder = field(default_factory=NameOrder)
    # The request's budget: checked per expression node and per series a function walks.
    deadline: Deadline = NO_DEADLINE


Inputs = list[list[GroupResult]]
Evaluate = Callable[[GexpContext, Inputs, list[str]], list[GroupResult]]


@dataclass(frozen=True)
class GexpFunction:
    name: str  # as OpenTSDB prints the function in an expression's text
    evaluate: Evaluate


def point_ints(result: GroupResult) -> BoolArray:
    """Whether each point of ``result`` is an integer."""
    if result.int_mask is not None and result.int_mask.size == result.ts_ms.size:
        return result.int_mask
    return np.full(result.ts_ms.size, bool(result.is_int), dtype=bool)


def derived(base: GroupResult, ts_ms: np.ndarray, values: Float64Array, ints: BoolArray,
            **changes: object) -> GroupResult:
    """A result with ``base``'s identity (metric, tags, annotations...) and new points."""
    ints = ints & ~np.isnan(values)
    fields: dict[str, object] = {
        "metric": base.metric, "tags": dict(base.tags),
        "aggregate_tags": list(base.aggregate_tags), "tsuids": list(base.tsuids),
        "query_index": base.query_index, "annotations": list(base.annotations),
        "json_null": base.json_null, "show_empty_annotations": base.show_empty_annotations}
    fields.update(changes)
    longs = np.where(ints, np.nan_to_num(values), 0).astype(np.int64) if ints.any() else None
    return GroupResult(ts_ms=np.asarray(ts_ms, dtype=np.int64), values=values,
                       is_int=bool(ints.size and ints.all()), int_mask=ints,
                       long_values=longs, **fields)  # type: ignore[arg-type]


def _flat(inputs: Inputs) -> list[GroupResult]:
    return [result for results in inputs for result in results]


def _each(ctx: GexpContext, inputs: Inputs) -> Iterable[GroupResult]:
    """Every input series, the request's deadline checked before each."""
    for result in _flat(inputs):
        ctx.deadline.check()
        yield result


def _in_range(ctx: GexpContext, result: GroupResult) -> np.ndarray:
    return (result.ts_ms >= ctx.start_ms) & (result.ts_ms <= ctx.end_ms)


def _first_param(params: list[str], missing: str) -> str:
    if not params:
        raise BadRequestError(missing)
    return params[0]


def _java_int(digits: str, message: str) -> int:
    value = int(digits)
    if value > INT_MAX:
        raise BadRequestError(message)
    return value


# --- one series at a time -------------------------------------------------------------------

def scale(ctx: GexpContext, inputs: Inputs, params: list[str]) -> list[GroupResult]:
    if not inputs:
        return []
    text = _first_param(params, "Missing scaling factor")
    if not text or any(c not in "-0123456789." for c in text):
        raise BadRequestError("Unparseable scale factor value: 0.0")
    try:
        factor = float(text)
    except ValueError:
        raise BadRequestError("Invalid parameter, must be an integer or floating point") from None
    factor_is_int = math.isfinite(factor) and factor == math.floor(factor)
    out = []
    for result in _each(ctx, inputs):
        ints = point_ints(result) & factor_is_int
        values = np.asarray(result.values, dtype=np.float64) * factor
        out.append(derived(result, result.ts_ms, values, ints))
    return out


def absolute(ctx: GexpContext, inputs: Inputs, params: list[str]) -> list[GroupResult]:
    return [derived(r, r.ts_ms, np.abs(r.values), point_ints(r)) for r in _flat(inputs)]


def alias(ctx: GexpContext, inputs: Inputs, params: list[str]) -> list[GroupResult]:
    if not inputs:
        return []
    if not params:
        raise BadRequestError("Missing the alias")
    template = ",".join(params)
    out = []
    for result in _each(ctx, inputs):
        name = template
        if "@" in name and result.tags:
            for key, value in result.tags.items():
                name = name.replace("@" + key, value)
        out.append(derived(result, result.ts_ms, np.array(result.values, dtype=np.float64),
                           point_ints(result), metric=name, tags={}, aggregate_tags=[]))
    return out


_WINDOW_UNITS_MS = {"day": 86_400_000, "d": 86_400_000, "hr": 3_600_000, "hour": 3_600_000,
                    "h": 3_600_000, "min": 60_000, "m": 60_000, "sec": 1000, "s": 1000}


def _leading_digits(text: str) -> str:
    """The digits right after the opening quote."""
    digits = ""
    for char in text[1:]:
        if not char.isdigit():
            break
        digits += char
    return digits


def _window(params: list[str]) -> tuple[int, bool]:
    """movingAverage's window: a point count, or ``'<n><unit>'`` in ms (then True)."""
    text = _first_param(params, "Missing moving average window size").strip()
    if text.isdigit() and text.isascii():
        size, timed = _java_int(text, "Invalid parameter, must be an integer"), False
    elif text.startswith("'") and text.endswith("'"):
        digits = _leading_digits(text)
        if not digits:
            raise BadRequestError(f"Invalid moving window parameter: {text}")
        count = _java_int(digits, f"Unable to parse moving window parameter: {text}")
        unit = text[len(digits) + 1:-1]
        if unit not in _WINDOW_UNITS_MS:
            raise BadRequestError(f"Unknown time unit={unit} in window={text}")
        size, timed = count * _WINDOW_UNITS_MS[unit], True
    else:
        raise BadRequestError(f"Unparseable window size: {text}")
    if size <= 0:
        raise BadRequestError("Moving average window must be an integer greater than zero")
    return size, timed


EXACT_WIDTH = 128  # windows up to this many points are summed in OpenTSDB's order


def _window_starts(ts: np.ndarray, valid: BoolArray, size: int, timed: bool) -> np.ndarray:
    """The first index of each point's window (-1 where the window is not full)."""
    index = np.arange(ts.size)
    if timed:
        starts = np.searchsorted(ts, ts - size, side="right")
        full = (index > 0) & (ts[0] <= ts - size)
    else:
        seen = np.cumsum(valid)
        positions = np.flatnonzero(valid)
        full = seen >= size
        starts = np.where(full, positions[np.maximum(seen - size, 0)] if positions.size
                          else 0, 0)
    return np.where(full, starts, -1)


def _averages(ts: np.ndarray, values: Float64Array, size: int, timed: bool) -> Float64Array:
    """Every point's moving average, 0 until the window is full. Narrow windows are summed
    newest to oldest, as OpenTSDB's MovingAverageAggregator does (the same doubles); wide ones
    from extended-precision prefix sums, so a long series with a wide window stays linear."""
    valid = ~np.isnan(values)
    starts = _window_starts(ts, valid, size, timed)
    here = np.arange(ts.size)
    widths = np.where(starts >= 0, here - starts + 1, 0)
    clean = np.where(valid, values, 0.0)  # adding 0.0 leaves a sum as it was: NaNs skipped
    counts = np.concatenate([[0], np.cumsum(valid)])
    first = np.maximum(starts, 0)
    count = counts[here + 1] - counts[first]
    widest = int(widths.max()) if widths.size else 0
    if widest <= EXACT_WIDTH:
        sums = np.zeros(ts.size, dtype=np.float64)
        for back in range(widest):
            inside = back < widths
            sums[inside] += clean[here[inside] - back]
    else:
        prefix = np.concatenate([[0], np.cumsum(clean, dtype=np.longdouble)])
        sums = (prefix[here + 1] - prefix[first]).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        averages = sums / np.maximum(count, 1)
    return np.where((starts >= 0) & (count > 0), averages, 0.0)


def moving_average(ctx: GexpContext, inputs: Inputs, params: list[str]) -> list[GroupResult]:
    if not inputs:
        return []
    size, timed = _window(params)
    out = []
    for result in _each(ctx, inputs):
        keep = _in_range(ctx, result)
        ts = result.ts_ms[keep]
        averages = _averages(ts, result.values[keep].astype(np.float64), size, timed)
        out.append(derived(result, ts, averages, np.zeros(ts.size, bool)))
    return out


_SHIFT_UNITS_MS = {"sec": 1000, "min": 60_000, "hr": 3_600_000, "day": 86_400_000,
                   "days": 86_400_000, "week": 604_800_000, "weeks": 604_800_000}


def time_shift(ctx: GexpContext, inputs: Inputs, params: list[str]) -> list[GroupResult]:
    """Moves the first series argument's points later by ``'<n><unit>'``."""
    if not inputs:
        return []
    text = _first_param(params, "Need amount of timeshift to perform timeshift").strip()
    if not (text.startswith("'") and text.endswith("'")):
        raise BadRequestError("Invalid timeshift parameter: eg '10min'")
    digits = _leading_digits(text)
    if not digits:
        raise BadRequestError(f"Invalid Parameter: {text}")
    count = _java_int(digits, f'For input string: "{digits}"')
    unit = text[len(digits) + 1:-1].strip()
    if unit not in _SHIFT_UNITS_MS:
        raise BadRequestError(f"unknown time unit={text[len(digits) + 1:].strip()}")
    shift_ms = count * _SHIFT_UNITS_MS[unit]
    if shift_ms <= 0:
        raise BadRequestError("timeshift <= 0")
    return [derived(r, r.ts_ms + shift_ms, np.array(r.values, dtype=np.float64), point_ints(r))
            for r in inputs[0]]


# --- ranking --------------------------------------------------------------------------------

def _top_n(params: list[str]) -> int:
    text = _first_param(params, "Need aggregation window for moving average")
    if not (text.isdigit() and text.isascii()):
        raise BadRequestError(f"Unparseable top n value: {text}")
    top = _java_int(text, "Invalid parameter, must be an integer")
    if top < 1:
        raise BadRequestError(f"Top n value must be greater than zero: {top}")
    return top


def _java_max(a: float, b: float) -> float:
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def _scores(ctx: GexpContext, series: list[GroupResult], latest: bool) -> list[float]:
    """Each series' value for ranking: its latest (highestCurrent) or largest (highestMax).
    Like OpenTSDB, timestamps where every series present has an integer go to integer slots
    (starting at Long.MIN_VALUE), the others to double slots (starting at Double.MIN_VALUE, a
    tiny positive number; NaN wins), and the two are combined at the end. highestCurrent's
    slots hold the values at the last timestamp of each kind (0 for a series without one)."""
    kept = []
    for result in series:
        ctx.deadline.check()
        keep = _in_range(ctx, result)
        kept.append((result.ts_ms[keep], result.values[keep], point_ints(result)[keep]))
    if not kept:
        return []
    double_stamps = np.unique(np.concatenate([ts[~ints] for ts, _, ints in kept]))
    paths = [~np.isin(ts, double_stamps) for ts, _, _ in kept]  # True: the integer path
    has_long = any(bool(path.any()) for path in paths)
    has_double = any(bool((~path).any()) for path in paths)
    last: dict[bool, int | None] = {
        kind: max((int(ts[path == kind].max()) for (ts, _, _), path in zip(kept, paths,
                                                                           strict=True)
                   if (path == kind).any()), default=None) for kind in (True, False)}
    scores = []
    for (ts, values, _), path in zip(kept, paths, strict=True):
        slot = {}
        for kind, initial in ((True, float(-2**63)), (False, 5e-324)):
            chosen = values[path == kind]
            if latest:
                at = ts[path == kind] == last[kind]
                slot[kind] = initial if last[kind] is None else (
                    float(chosen[at][0]) if at.any() else 0.0)
            else:
                slot[kind] = _java_max(initial, float(chosen.max())) if chosen.size else initial
        if has_long and has_double:
            scores.append(_java_max(slot[True], slot[False]))
        else:
            scores.append(slot[True] if has_long else slot[False])
    return scores


def _descending(value: float) -> tuple[bool, float, bool]:
    """Java's ``-Double.compare`` order: NaN first, then larger first, 0.0 before -0.0."""
    if math.isnan(value):
        return (False, 0.0, False)
    return (True, -value, math.copysign(1.0, value) < 0)


def _highest(latest: bool) -> Evaluate:
    def evaluate(ctx: GexpContext, inputs: Inputs, params: list[str]) -> list[GroupResult]:
        if not inputs:
            return []
        top = _top_n(params)
        series = _flat(inputs)
        if latest:  # highestCurrent skips empty series, highestMax does not
            series = [s for s in series if s.ts_ms.size]
        scores = _scores(ctx, series, latest)
        order = sorted(range(len(series)), key=lambda i: _descending(scores[i]))
        return [series[i] for i in order[:top]]
    return evaluate


# --- series arithmetic ----------------------------------------------------------------------

def _key(ctx: GexpContext, result: GroupResult) -> bytes:
    """OpenTSDB's union key: the series' tag UID pairs in tagk UID order."""
    pairs = sorted((ctx.uids.tagk(k), ctx.uids.tagv(v)) for k, v in result.tags.items())
    return b"".join(k + v for k, v in pairs)


def _union_one(ctx: GexpContext, members: list[GroupResult | None],
               fold: Callable[[Float64Array, Float64Array], Float64Array]) -> GroupResult:
    present = [m for m in members if m is not None]
    metric = min((m.metric for m in present), key=ctx.uids.metric)
    agg = sorted({tagk for m in present for tagk in m.aggregate_tags}, key=ctx.uids.tagk)
    stamps = np.unique(np.concatenate([m.ts_ms[_in_range(ctx, m)] for m in present]))
    total: Float64Array | None = None
    for member in members:
        column = np.zeros(stamps.size, dtype=np.float64)  # OpenTSDB's fill: zero
        if member is not None:
            at = np.searchsorted(member.ts_ms, stamps)
            hit = at < member.ts_ms.size
            hit[hit] = member.ts_ms[at[hit]] == stamps[hit]
            column[hit] = member.values[at[hit]]
            column = np.nan_to_num(column, nan=0.0, posinf=np.inf, neginf=-np.inf)
        total = column if total is None else fold(total, column)
    assert total is not None
    first = members[0]
    return GroupResult(
        metric=metric, tags=dict(first.tags) if first is not None else {},
        aggregate_tags=agg, tsuids=[],  # OpenTSDB's EDPtoDPS lists none
        ts_ms=stamps, values=total, is_int=False, query_index=0,  # as OpenTSDB's EDPtoDPS
        show_empty_annotations=True)


def _divide(a: Float64Array, b: Float64Array) -> Float64Array:
    """``a / b`` with OpenTSDB's expression arithmetic: dividing by zero gives 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b == 0, 0.0, a / np.where(b == 0, 1.0, b))


def _series_op(fold: Callable[[Float64Array, Float64Array], Float64Array]) -> Evaluate:
    def evaluate(ctx: GexpContext, inputs: Inputs, params: list[str]) -> list[GroupResult]:
        if not inputs:
            return []
        if not 2 <= len(inputs) <= 26:
            raise BadRequestError(f"Must have 2 to 26 series, got {len(inputs)} instead")
        slots: dict[bytes, list[GroupResult | None]] = {}
        for position, results in enumerate(inputs):
            for result in results:
                slots.setdefault(_key(ctx, result), [None] * len(inputs))[position] = result
        with np.errstate(over="ignore", invalid="ignore"):
            return [_union_one(ctx, slots[key], fold) for key in sorted(slots)]
    return evaluate


def _registry(entries: Iterable[tuple[tuple[str, ...], str, Evaluate]]) -> dict[str,
                                                                             GexpFunction]:
    return {alias_name: GexpFunction(text, evaluate)
            for names, text, evaluate in entries for alias_name in names}


FUNCTIONS: dict[str, GexpFunction] = _registry([
    (("sumSeries", "sum"), "sumSeries", _series_op(np.add)),
    (("diffSeries", "difference"), "diffSeries", _series_op(np.subtract)),
    (("multiplySeries", "multiply"), "multiplySeries", _series_op(np.multiply)),
    (("divideSeries", "divide"), "divideSeries", _series_op(_divide)),
    (("scale",), "scale", scale),
    (("absolute",), "absolute", absolute),
    (("alias",), "alias", alias),
    (("movingAverage",), "movingAverage", moving_average),
    (("highestCurrent",), "highestCurrent", _highest(latest=True)),
    (("highestMax",), "highestMax", _highest(latest=False)),
    (("timeShift", "shift"), "timeshift", time_shift),
])
