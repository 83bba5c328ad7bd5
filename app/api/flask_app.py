"""The Flask class pytsd's app is made of: Flask, with one answer kept per request.

Flask asks :meth:`Flask.ensure_sync` about every hook and the view of every request (ten
calls for ``/api/version``, each an ``inspect.iscoroutinefunction``: ~9 µs of a ~95 µs
request). pytsd's hooks and views are plain functions registered once, so the answer for
each is kept (Flask documents the method as the one to override).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Flask


class TsdFlask(Flask):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sync: dict[Callable[..., Any], Callable[..., Any]] = {}

    def ensure_sync(self, func: Callable[..., Any]) -> Callable[..., Any]:
        sync = self._sync.get(func)
        if sync is None:
            sync = self._sync[func] = super().ensure_sync(func)
        return sync
