"""The iteration order of a ``java.util.HashMap``/``HashSet`` of strings (Java 8+).

OpenTSDB keeps expression variables and result tags in hash maps, and that order shows in its
answers: which variable's tags an expression series carries, the key order of ``commonTags``,
which missing variable a validation message names first. Iteration goes bucket by bucket
(``(h ^ h >>> 16) & (capacity - 1)`` of ``String.hashCode``), insertion order within a bucket;
a resize splits buckets without reordering them, so the order follows from the final capacity.
"""

from __future__ import annotations

from collections.abc import Iterable


def string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _spread(text: str) -> int:
    h = string_hash(text) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _table_size_for(capacity: int) -> int:
    size = 1
    while size < capacity:
        size <<= 1
    return size


def hashmap_order(keys: Iterable[str], initial_capacity: int = 16) -> list[str]:
    """``keys`` (insertion order, repeats ignored) in the order a HashMap iterates them."""
    unique = list(dict.fromkeys(keys))
    capacity = _table_size_for(max(initial_capacity, 1))
    while len(unique) > int(capacity * 0.75):
        capacity <<= 1
    position = {key: i for i, key in enumerate(unique)}
    return sorted(unique, key=lambda k: (_spread(k) & (capacity - 1), position[k]))
