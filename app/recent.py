"""A bounded memory of recent keys: the oldest forgotten past its size, safe across threads.

What one process remembers to read better (the shapes it read, the ranges it asked, the keys
it holds back, where long scans split) is each kept in one of these, so that how such a
memory is bounded and locked is decided here alone.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Recent(Generic[K, V]):
    """The ``size`` keys set last, each with its value; setting a key makes it the newest."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, key: K) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key: K) -> V | None:
        with self._lock:
            return self._items.get(key)

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._put(key, value)

    def add(self, key: K, value: V) -> bool:
        """:meth:`put`; whether ``key`` was there already (the one look that also sets)."""
        with self._lock:
            there = key in self._items
            self._put(key, value)
            return there

    def get_and_drop_if(self, key: K, drop: Callable[[V], bool]) -> V | None:
        """``key``'s value, forgotten if ``drop`` says so of it (one step: no other thread
        sets the key in between)."""
        with self._lock:
            value = self._items.get(key)
            if value is not None and drop(value):
                del self._items[key]
            return value

    def pop(self, key: K) -> V | None:
        with self._lock:
            return self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def _put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)
