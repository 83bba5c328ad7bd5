"""Work a worker repeats on a timer in a daemon thread: compaction and the rollup pass."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

StatLine = tuple[str, "float | int", dict[str, str]]
"""One ``/api/stats`` line a background job reports: metric, value, tags."""


def run_every(name: str, interval_s: float, work: Callable[[], str | None],
              wait_first: bool) -> threading.Thread:
    """Start a daemon thread ``pytsd-<name>`` calling ``work`` every ``interval_s`` seconds.

    ``work`` returns a line worth logging, or None. An exception is logged and the thread
    goes on: a failed pass must not stop the next one, which retries.
    """
    def loop() -> None:
        if wait_first:
            time.sleep(interval_s)
        while True:
            try:
                done = work()
                if done:
                    log.info("%s", done)
            except Exception:
                log.exception("background %s failed", name)
            time.sleep(interval_s)

    thread = threading.Thread(target=loop, name=f"pytsd-{name}", daemon=True)
    thread.start()
    return thread
