"""Comparing two servers' answers to one request.

Numbers are parsed with their printed kind, so ``1`` and ``1.0`` differ (OpenTSDB prints longs
as integers and doubles with a fraction). Values agree within a relative 1e-9. Series are
matched by metric + tags + aggregateTags, not by position (OpenTSDB's group order is a hash
order); tsuid lists and aggregateTags compare as sets. Errors compare by status and message.
"""

from __future__ import annotations

import json
import math
from typing import Any


class Num:
    """A JSON number that remembers whether it was printed as an integer."""

    __slots__ = ("is_int", "value")

    def __init__(self, text: str, is_int: bool) -> None:
        self.is_int = is_int
        self.value: float = int(text) if is_int else float(text)

    def __repr__(self) -> str:
        return repr(self.value) if self.is_int else repr(float(self.value))


def parse(text: str) -> Any:
    return json.loads(text, parse_int=lambda t: Num(t, True),
                      parse_float=lambda t: Num(t, False),
                      parse_constant=lambda t: Num(t, False))


def plain(value: Any) -> Any:
    """Back to ordinary JSON values (for keys and messages)."""
    if isinstance(value, Num):
        return value.value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def close(a: float, b: float) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b)) or abs(a - b) < 1e-12


def series_key(series: Any) -> str:
    if not isinstance(series, dict):
        return json.dumps(plain(series), sort_keys=True)
    tags = plain(series.get("tags"))
    agg = sorted(plain(series.get("aggregateTags") or []))
    index = plain((series.get("query") or {}).get("index"))
    return json.dumps([plain(series.get("metric")), tags, agg, index], sort_keys=True)


UNORDERED = {"aggregateTags", "tsuids"}
# Maps whose key order is a Java HashMap's (tags) or not part of the contract (the echo).
ORDER_FREE = {"tags", "custom", "query", "rateOptions", "filters"}


def _sort_key(item: Any) -> str:
    if isinstance(item, dict) and ("metric" in item or "dps" in item):
        return series_key(item) + json.dumps(plain(item.get("dps")), sort_keys=True,
                                             default=str)
    return json.dumps(plain(item), sort_keys=True, default=str)


def diff(a: Any, b: Any, path: str = "$", out: list[str] | None = None,
         limit: int = 500) -> list[str]:
    """Differences between ``a`` (OpenTSDB) and ``b`` (pytsd) as readable lines."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(a, Num) and isinstance(b, Num):
        _diff_numbers(a, b, path, out)
    elif isinstance(a, dict) and isinstance(b, dict):
        _diff_maps(a, b, path, out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        _diff_lists(a, b, path, out, limit)
    elif type(a) is not type(b) or a != b:
        out.append(f"{path}: {_short(a)} vs {_short(b)}")
    return out


def _diff_numbers(a: Num, b: Num, path: str, out: list[str]) -> None:
    if a.is_int != b.is_int:
        out.append(f"{path}: printed {'integer' if a.is_int else 'float'} {a!r} vs "
                   f"{'integer' if b.is_int else 'float'} {b!r}")
    elif not close(a.value, b.value):
        out.append(f"{path}: {a!r} vs {b!r}")


def _diff_maps(a: dict[str, Any], b: dict[str, Any], path: str, out: list[str],
               limit: int) -> None:
    if set(a) != set(b):
        out.append(f"{path}: keys only in OpenTSDB {sorted(set(a) - set(b))}, "
                   f"only in pytsd {sorted(set(b) - set(a))}")
    elif list(a) != list(b) and path.rsplit(".", 1)[-1] not in ORDER_FREE:
        out.append(f"{path}: key order {list(a)} vs {list(b)}")
    for key in a:
        if key in b:
            diff(a[key], b[key], f"{path}.{key}", out, limit)


def _diff_lists(a: list[Any], b: list[Any], path: str, out: list[str], limit: int) -> None:
    unordered = path.rsplit(".", 1)[-1] in UNORDERED or (
        path == "$" and all(isinstance(x, dict) for x in a + b))
    if unordered:
        a, b = sorted(a, key=_sort_key), sorted(b, key=_sort_key)
    if len(a) != len(b):
        out.append(f"{path}: {len(a)} items vs {len(b)}"
                   + (_series_sets(a, b) if path == "$" else ""))
        return
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        diff(x, y, f"{path}[{i}]", out, limit)


def _series_sets(a: list[Any], b: list[Any]) -> str:
    keys_a = {series_key(s) for s in a}
    keys_b = {series_key(s) for s in b}
    return (f" (only in OpenTSDB {sorted(keys_a - keys_b)[:3]}, "
            f"only in pytsd {sorted(keys_b - keys_a)[:3]})")


def _short(value: Any) -> str:
    text = json.dumps(plain(value), default=str)
    return text if len(text) < 200 else text[:200] + "…"


def compare(ref: tuple[int, str], got: tuple[int, str]) -> list[str]:
    """Differences between two (status, body) answers; empty when they agree."""
    (status_a, text_a), (status_b, text_b) = ref, got
    if status_a != status_b:
        return [f"status {status_a} vs {status_b}: {_message(text_a)!r} vs {_message(text_b)!r}"]
    if status_a >= 400 and '"error"' in text_a:
        msg_a, msg_b = _message(text_a), _message(text_b)
        return [] if msg_a == msg_b else [f"message {msg_a!r} vs {msg_b!r}"]
    try:  # a 200, or a 400 with a body of its own (/api/put?details)
        json_a, json_b = parse(text_a), parse(text_b)
    except ValueError:
        return [] if text_a == text_b else [f"body {text_a[:200]!r} vs {text_b[:200]!r}"]
    for answer in (json_a, json_b):  # a lookup's "time" is its duration
        if isinstance(answer, dict) and "results" in answer:
            answer.pop("time", None)
    return diff(json_a, json_b)


def _message(text: str) -> str:
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text[:200]
